"""What a claim costs, measured beside the database's own floor: ``make bench``."""
