"""The cloud under the fleet: the provider interface (``provider``), EC2 on boto3, the in-memory fake, the AWS clients and their error boundary, the cluster token's SSM parameter, capacity slots."""
