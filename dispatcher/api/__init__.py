"""The dispatcher's wire: gRPC servicers, the Open Inference Protocol, what Status says."""
