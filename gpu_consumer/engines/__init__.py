"""The GPU stage's engines, its backend seam. The encoders': protocol.py (the one narrow protocol every
backend implements, and EngineLoadError), factory.py (which backend a worker runs, its batch
bounds and what its batches cost; each backend imported only when picked, so a CPU host never
imports torch), and one module per backend: onnxruntime_engine.py (the CPU fallback, and ONNX
Runtime's own CUDA/TensorRT providers), torch_engine.py (TorchScript on CUDA), tensorrt_engine.py
(a TensorRT plan). A new backend is a module here and its branch in factory.py. Causal LMs'
engines decode many sequences at once behind a protocol of their own: generation_protocol.py (the
protocol, what bounds an engine, its errors), generation_factory.py (which one a worker runs),
vllm_engine.py where vLLM is installed, else transformers_engine.py (transformers' continuous
batching); the rest of generation is gpu_consumer/generation/.
"""
