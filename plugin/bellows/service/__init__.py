"""The live service: wiring of the core, the Kubernetes side and the event bus."""
