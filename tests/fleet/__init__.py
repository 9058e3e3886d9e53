"""Fleet tests: several ``autonomous daemon`` processes over one log, each due wake run once."""
