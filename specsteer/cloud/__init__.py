"""The Cloud: sessions that verify drafts, the service, its HTTP contract, server, client and process."""
