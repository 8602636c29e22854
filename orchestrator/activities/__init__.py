"""Activities: the only code workflows call that touches the world. Thin and idempotent."""
