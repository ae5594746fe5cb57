"""A small built-in corpus for the examples (written for this project)."""

SENTENCES = [
    "the quick river carries snow from the mountain to the sea",
    "a stream of tuples flows through spouts and bolts",
    "every checkpoint commits the state of every stateful bolt",
    "the spark driver plans a job for each transaction",
    "storm taught us to ack every tuple we emit",
    "a word count is the hello world of stream processing",
    "state survives a crash when it was committed before the crash",
    "the acker xors ids until the tree is complete",
    "rollback returns the state to the last commit",
    "bolts that keep state must keep it in managed state",
    "the checkpoint spout prepares then commits then prepares again",
    "spark retries a failed task and the result stays exact",
    "redis keeps the committed hash and the prepared delta",
    "fields grouping sends the same word to the same task",
    "a replayed tuple is counted again unless the transaction rolled back",
    "one job per checkpoint keeps the snapshot aligned",
]


def sentence(i: int) -> str:
    """The ``i``-th sentence of an endless cycle over the corpus."""
    return SENTENCES[i % len(SENTENCES)]


def words(text: str) -> list[str]:
    """How the split bolt tokenizes a sentence."""
    return text.lower().split()
