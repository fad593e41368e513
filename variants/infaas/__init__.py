"""Model-vertical scaling (INFaaS): getVariant, variant states, the model autoscalers, the VM autoscaler, one model-loop round and its capacity hint."""
