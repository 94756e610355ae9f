"""The model repository on disk: where it is (one per user, or where an env var or option moves
it), its folders (models/<name>/<version>/), each version's config.json (config.py: ModelConfig,
the tensors, tokenizer, image and generation settings), and which version is newer and served
when none is named (versions.py).

Both stages read it (load_model_config), so it sits below them and imports nothing of ours.
Filling it (exporting the shipped models, importing a user's folder, the parity check each
version passes) is model_import/'s.
"""
