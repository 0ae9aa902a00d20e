"""Real local stand-ins for the cloud services, as context managers usable outside pytest.

Each `*_server()` / `*_service()` yields an object whose `env` (set) and `unset` (remove)
describe the standard environment that points clients at it; tests/conftest.py wraps them
as session fixtures. Nothing starts on import.

    moto.moto_server()             AWS APIs            AWS_ENDPOINT_URL
    registry.registry_server(...)  image registry      (log in as AWS with the ECR token)
    podman.podman_service(...)     Docker Engine API   DOCKER_HOST
    kube.kube_server()             Kubernetes API      KUBECONFIG
"""
