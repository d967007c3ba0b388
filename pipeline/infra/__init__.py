"""Infrastructure: processes, servers, HTTP clients and stores, each behind one module."""
