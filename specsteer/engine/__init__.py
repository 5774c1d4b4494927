"""One generation: settings, preparation and the loop that drives an Edge over a link."""
