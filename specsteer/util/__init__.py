"""Small helpers with no project dependencies: plain-JSON values, background work followed as an iterator."""
