"""The embedded cloud for the demo and tests: moto EC2 on loopback, local worker processes, a local IMDS."""
