"""Each database's claim statements, written whole, beside the errors that
mean "try again" there: ``postgresql``, ``mysql`` (MariaDB and MySQL, a
Galera node's settings too) and ``sqlite``. They import nothing: the
statements' parameters are named, and ``jobclaims.claims.statements``
chooses a database's backend."""
