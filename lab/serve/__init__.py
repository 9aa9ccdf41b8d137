"""`lab serve`: the gated configuration over REST (FastAPI on uvicorn), secure, durable and fast.

A thin shell like the CLI: ``settings`` (flags > environment > config file), ``bundle`` (what is
served, GO only), ``auth`` (hashed keys, namespace patterns, rate limits), ``service`` (the store,
group commit, batched query embedding), ``app`` and ``routes`` (HTTP), ``metrics`` (Prometheus).
"""
