"""The Kubernetes target: a Kubeflow PyTorchJob from the JobSpec."""
