"""HTTP routes: each module turns requests into `om_core` calls and results into `om_api.schemas`."""
