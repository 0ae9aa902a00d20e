"""vLLM's OpenAI server on Kubernetes (Deployment + Service): the serve-kube slice."""
