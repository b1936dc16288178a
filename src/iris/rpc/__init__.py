"""Foundation layer: wire models, enums, errors and the HTTP client base shared by every process."""
