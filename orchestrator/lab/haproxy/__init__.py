"""The lab's live traffic through a real HAProxy (``orchestrator lab serve --data-plane haproxy``).

HAProxy is the data plane: a frontend per PoP hashes the user into a bucket and looks the
region up in a live map; a region's capacity is its servers' ``maxconn`` and queue. Each
region is served by its own backend process. docs/fleet-contract.md, "The lab behind a real HAProxy" describes it.
"""
