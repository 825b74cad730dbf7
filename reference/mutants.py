"""Named planted bugs: the registry the model's (reference/model.py) and the checker's
(conformance/contract.py) mutation campaigns share. Holds no element rule, so the checker
may use it and stay independent of the reference's helpers."""


class Mutants(dict):
    """name -> (id, description) of one kind of planted bug. Ids count from 1 (0: none) and
    are handed out as module-level ints, so numba compiles `mutant == NAME` as a comparison
    with a constant."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def add(self, name, doc):
        """Register the mutant `name`; its id."""
        if name in self:
            raise ValueError(f"{self.kind} mutant {name!r} is registered twice")
        self[name] = (len(self) + 1, doc)
        return len(self)

    def id_of(self, name):
        """The id of the mutant `name`; ValueError naming a few valid names otherwise."""
        if name not in self:
            label = f"{self.kind} mutant" if self.kind else "mutant"
            raise ValueError(f"unknown {label} {name!r}; valid names include {', '.join(list(self)[:4])}, ... "
                             f"({len(self)} in all)")
        return self[name][0]
