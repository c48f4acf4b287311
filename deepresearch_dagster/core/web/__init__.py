"""Web access: search providers, safe URL fetching and main-content extraction."""
