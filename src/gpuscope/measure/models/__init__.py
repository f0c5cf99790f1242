"""Hugging Face causal LMs built for measurement: random-weight models on the device, the training step every workload
shares, the tiny configs of the host fits, and the gs-gqa attention."""
