"""Timer messages: the wheel service, cancel handles, and what a fired record becomes."""
