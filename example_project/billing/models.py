from django.db import models


class Invoice(models.Model):
    number = models.CharField(max_length=20, unique=True)
    amount_cents = models.PositiveIntegerField()
    paid = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.number


class Charge(models.Model):
    """Money taken from a customer. Two charges for one invoice is the bug."""

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="charges")
    amount_cents = models.PositiveIntegerField()
    charged_by_pid = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"{self.amount_cents} cents for {self.invoice}"
