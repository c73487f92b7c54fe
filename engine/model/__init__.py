"""The model: GGUF weights, the llama forward pass in numpy, quantized products and the synthetic backend."""
