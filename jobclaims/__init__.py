"""Make a scheduled Django job safe to run twice."""

from jobclaims.exceptions import ClaimLost

__all__ = ["ClaimLost"]
