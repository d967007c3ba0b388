"""Broken engines against the golden stage, spread over files so the parallel phase runs them on both workers."""
