"""occupy's benchmarks: each module measures occupy against its peers in one run."""
