"""The encoders' engines, the GPU stage's backend seam: protocol.py (the one narrow protocol every
backend implements, and EngineLoadError), factory.py (which backend a worker runs, its batch
bounds and what its batches cost; each backend imported only when picked, so a CPU host never
imports torch), and one module per backend: onnxruntime_engine.py (the CPU fallback, and ONNX
Runtime's own CUDA/TensorRT providers), torch_engine.py (TorchScript on CUDA), tensorrt_engine.py
(a TensorRT plan). A new backend is a module here and its branch in factory.py. Causal LMs run on
generation/'s engines (vLLM, transformers' continuous batching) behind a protocol of their own.
"""
