"""Packaging for the BERT pre-training system.

Dataflow workers install the code through ``--setup_file ./setup.py``; the
``gcp`` extra pulls in Beam's Google Cloud I/O, ``train`` torch for the trainer
and fine-tuning, ``dev`` the tools the tests need. CI installs with ``-c constraints.txt`` so every version is pinned.
"""

from setuptools import find_packages, setup

setup(
    name="bert-pretraining",
    version="0.1.0",
    description="Pre-train BERT-style encoders: Beam corpus pipelines, WordPiece, sharded examples, "
    "a streaming PyTorch trainer and fine-tuning.",
    python_requires=">=3.10",
    packages=find_packages(
        include=["pipelines*", "wordpiece*", "pretrain*", "finetune*", "schemas*", "chain*"]
    ),
    install_requires=[
        "apache-beam>=2.77,<3",
        "pyarrow>=15",
        "tokenizers>=0.20",
        "fsspec>=2024.1",
        "gcsfs>=2024.1",
        "click>=8.1",
        # Wikitext parsing (a real parser instead of regexes).
        "mwparserfromhell>=0.6.6",
        # Sentence segmentation with no run-time download; see docs/sentence-segmentation.md.
        "blingfire>=0.1.8",
        # Encoding detection for books that are neither UTF-8 nor UTF-16.
        "charset-normalizer>=3",
        "numpy>=1.24",
        "tqdm>=4.66",
        # The PNG of the examples length histogram (Agg backend, no display).
        "matplotlib>=3.8",
        # The chain's HTML reports from their Markdown.
        "markdown>=3.5",
    ],
    extras_require={
        # torch is only for pretrain/ and finetune/: Dataflow workers, which install this package
        # through --setup_file, never download a multi-GB torch build.
        "train": ["torch>=2.4", "tensorboard>=2.16", "safetensors>=0.4"],
        "gcp": ["apache-beam[gcp]>=2.77,<3", "build>=1"],
        # s3:// paths: s3fs for every file the product reads or writes (schemas/storage.py), on Beam's
        # workers too; Beam's S3 filesystem for Beam's own temporary and staging files.
        "aws": ["s3fs>=2024.1", "apache-beam[aws]>=2.77,<3"],
        "dev": [
            "pytest>=8",
            "pytest-xdist>=3",
            "ruff>=0.6",
            "gcp-storage-emulator>=2024.1",
            "transformers>=5",
            "datasets>=3",
            "seqeval>=1.2",
            "moto[server]>=5",
        ],
    },
    entry_points={
        "console_scripts": [
            "pipelines=pipelines.cli:main",
            "wordpiece=wordpiece.cli:main",
            "pretrain=pretrain.cli:main",
            "finetune=finetune.cli:main",
            "chain=chain.cli:main",
        ]
    },
)
