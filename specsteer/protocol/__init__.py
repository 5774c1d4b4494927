"""What crosses between the Edge and the Cloud: wire messages, the Edge's link and its emulation, who may connect."""
