"""Every command-line tool of the project, by the name a user types."""

from chain.cli import main as chain_main
from finetune.cli import main as finetune_main
from pipelines.cli import main as pipelines_main
from pretrain.cli import main as pretrain_main
from wordpiece.cli import main as wordpiece_main

CLIS = {
    "pipelines": pipelines_main,
    "wordpiece": wordpiece_main,
    "pretrain": pretrain_main,
    "finetune": finetune_main,
    "chain": chain_main,
}
