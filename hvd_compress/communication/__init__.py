"""How compressed payloads travel between ranks."""
