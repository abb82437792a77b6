"""What the benchmark programs share (each program in ``benchmarks/`` imports only this).

- ``cpu``: CPU seconds of processes, a process tree and the whole machine; a sampler.
- ``servers``: start a child server, wait for its health, stop it by its PID.
- ``isolation``: when a program re-runs itself in a loopback-only namespace.
- ``model``: the default model, its weights and the stack config of serveout's replicas.
- ``references``: the reference servers (bare vLLM, Ray Serve LLM) started beside the stack.
- ``engine``: one vLLM engine driven in-process (step time, engine vs simulator).
- ``streaming_client``: the small streaming client of the serving benchmarks.
- ``vllm_bench``: vLLM's ``bench serve`` and ``loadtest run`` as measured child programs.
- ``timed_answers``, ``timed_server``, ``fidelity_truth``: the server of known timing
  and the truth computed from what it recorded.
- ``wake_probe``: how late this machine wakes a sleeping process.
"""
