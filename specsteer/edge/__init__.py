"""The Edge: the Specialist on the private prompt, drafting and settling the Cloud's verdicts."""
