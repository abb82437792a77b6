"""The search: strategies that propose the next trial (pure) and the loop that measures,
persists and reports each one."""
