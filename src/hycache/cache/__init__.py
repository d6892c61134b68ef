"""The cache facade and what a request holds (see ``hycache.cache.facade``)."""
