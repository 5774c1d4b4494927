"""SpecSteer: personalised generation by speculative decoding with a private on-device drafter."""
