"""The clients' side of the engine process: HTTP client, finding or starting the process, one-shot chat."""
