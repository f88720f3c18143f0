"""Framework callbacks that time the standard stages without touching the
training loop:

    from laggard.integrations.huggingface import LaggardCallback   # transformers.Trainer
    from laggard.integrations.lightning import LaggardCallback     # Lightning Trainer

Each module imports its framework only when it is itself imported, so
`import laggard` never pulls in transformers or lightning.
"""
