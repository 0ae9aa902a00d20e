"""The TrainJob engine of the Kubernetes target: Kubeflow Trainer v2 (v2.3.0) on JobSet."""
