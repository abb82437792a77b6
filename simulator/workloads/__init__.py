"""Real-shaped traffic for the routing and autoscaling oracles, as token ids with fixed
arrival times (every policy is judged on exactly the same requests):

- :mod:`.mooncake`: a Mooncake trace excerpt (:func:`loadtest.workloads.replay.replay_plan`);
- :mod:`.conversations`: multi-turn chat sessions that resend their history, no session header;
- :mod:`.rag`: RAG prompts over shared documents;

the last two in English and Vietnamese, from the bundled prompt sets.
"""
