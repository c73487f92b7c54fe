"""Every flag the named engine releases' argument parsers accept, read from the releases themselves (each list:
the ``add_argument`` names of the named file in the release's wheel on PyPI, or the fields of the named dataclass
its parser turns into flags). tests/unit/sim/test_emit.py checks every flag ``pdserve plan --emit`` writes against
them."""

# sglang 0.5.3 (PyPI wheel sglang-0.5.3-py3-none-any.whl): sglang/srt/server_args.py, ServerArgs.add_cli_args;
# the flags of python -m sglang.launch_server
SGLANG_0_5_3 = frozenset("""
    --allow-auto-truncate --api-key --attention-backend --base-gpu-id --bucket-e2e-request-latency
    --bucket-inter-token-latency --bucket-time-to-first-token --chat-template --chunked-prefill-size
    --collect-tokens-histogram --completion-template --config --constrained-json-whitespace-pattern --context-length
    --cpu-offload-gb --crash-dump-folder --cuda-graph-bs --cuda-graph-max-bs --custom-weight-loader --data-parallel-size
    --debug-tensor-dump-inject --debug-tensor-dump-input-file --debug-tensor-dump-output-folder
    --debug-tensor-dump-prefill-only --decode-attention-backend --decode-log-interval --deepep-config --deepep-mode
    --delete-ckpt-after-loading --device --disable-chunked-prefix-cache --disable-cuda-graph
    --disable-cuda-graph-padding --disable-custom-all-reduce --disable-fast-image-processor
    --disable-flashinfer-cutlass-moe-fp4-allgather --disable-hybrid-swa-memory --disable-outlines-disk-cache
    --disable-overlap-schedule --disable-radix-cache --disable-shared-experts-fusion --disaggregation-bootstrap-port
    --disaggregation-decode-dp --disaggregation-decode-enable-offload-kvcache --disaggregation-decode-polling-interval
    --disaggregation-decode-tp --disaggregation-ib-device --disaggregation-mode --disaggregation-prefill-pp
    --disaggregation-transfer-backend --dist-init-addr --dist-timeout --download-dir --dp-size --ds-channel-config-path
    --ds-heavy-channel-num --ds-heavy-channel-type --ds-heavy-token-num --ds-sparse-decode-threshold --dtype
    --dynamic-batch-tokenizer-batch-size --dynamic-batch-tokenizer-batch-timeout --enable-cache-report
    --enable-cudagraph-gc --enable-custom-logit-processor --enable-deepep-moe --enable-deterministic-inference
    --enable-double-sparsity --enable-dp-attention --enable-dp-lm-head --enable-dynamic-batch-tokenizer --enable-ep-moe
    --enable-eplb --enable-expert-distribution-metrics --enable-flashinfer-allreduce-fusion
    --enable-flashinfer-cutedsl-moe --enable-flashinfer-cutlass-moe --enable-flashinfer-mxfp4-moe
    --enable-flashinfer-trtllm-moe --enable-fp32-lm-head --enable-hierarchical-cache --enable-lmcache --enable-lora
    --enable-memory-saver --enable-metrics --enable-metrics-for-all-schedulers --enable-mixed-chunk --enable-mscclpp
    --enable-multimodal --enable-nan-detection --enable-nccl-nvls --enable-p2p-check --enable-pdmux
    --enable-priority-scheduling --enable-profile-cuda-graph --enable-request-time-stats-logging
    --enable-return-hidden-states --enable-single-batch-overlap --enable-symm-mem --enable-tokenizer-batch-encode
    --enable-torch-compile --enable-torch-symm-mem --enable-trace --enable-triton-kernel-moe --enable-two-batch-overlap
    --enable-weights-cpu-backup --ep --ep-dispatch-algorithm --ep-num-redundant-experts --ep-size --eplb-algorithm
    --eplb-min-rebalancing-utilization-threshold --eplb-rebalance-layers-per-chunk --eplb-rebalance-num-iterations
    --expert-distribution-recorder-buffer-size --expert-distribution-recorder-mode --expert-parallel-size
    --file-storage-path --flashinfer-mla-disable-ragged --flashinfer-mxfp4-moe-precision --gc-warning-threshold-secs
    --generation-tokens-buckets --gpu-id-step --grammar-backend --hicache-io-backend --hicache-mem-layout
    --hicache-ratio --hicache-size --hicache-storage-backend --hicache-storage-backend-extra-config
    --hicache-storage-prefetch-policy --hicache-write-policy --host --hybrid-kvcache-ratio --init-expert-location
    --is-embedding --json-model-override-args --keep-mm-feature-on-device --kv-cache-dtype --kv-events-config
    --load-balance-method --load-format --load-watch-interval --log-level --log-level-http --log-requests
    --log-requests-level --lora-backend --lora-paths --lora-target-modules --mamba-ssm-dtype --max-loaded-loras
    --max-lora-chunk-size --max-lora-rank --max-loras-per-batch --max-mamba-cache-size --max-micro-batch-size
    --max-prefill-tokens --max-queued-requests --max-running-requests --max-total-tokens --mem-fraction-static
    --mm-attention-backend --model --model-impl --model-loader-extra-config --model-path --moe-a2a-backend
    --moe-dense-tp-size --moe-runner-backend --nccl-init-addr --nccl-port --nnodes --node-rank --nsa-decode
    --nsa-prefill --num-continuous-decode-steps --num-reserved-decode-tokens --numa-node --offload-group-size
    --offload-mode --offload-num-in-group --offload-prefetch-step --oltp-traces-endpoint --page-size
    --pipeline-parallel-size --port --pp-size --preferred-sampling-params --prefill-attention-backend
    --prefill-round-robin-balance --priority-scheduling-preemption-threshold --prompt-tokens-buckets --quantization
    --quantization-param-path --radix-eviction-policy --random-seed --reasoning-parser
    --remote-instance-weight-loader-seed-instance-ip --remote-instance-weight-loader-seed-instance-service-port
    --remote-instance-weight-loader-send-weights-group-ports --revision --sampling-backend --schedule-conservativeness
    --schedule-low-priority-values-first --schedule-policy --scheduler-recv-interval --served-model-name
    --show-time-cost --skip-server-warmup --skip-tokenizer-init --sleep-on-idle --sm-group-num
    --speculative-accept-threshold-acc --speculative-accept-threshold-single --speculative-algorithm
    --speculative-attention-mode --speculative-draft-model --speculative-draft-model-path
    --speculative-draft-model-revision --speculative-eagle-topk --speculative-ngram-branch-length
    --speculative-ngram-capacity --speculative-ngram-match-type --speculative-ngram-max-bfs-breadth
    --speculative-ngram-max-match-window-size --speculative-ngram-min-bfs-breadth
    --speculative-ngram-min-match-window-size --speculative-num-draft-tokens --speculative-num-steps
    --speculative-token-map --stream-interval --stream-output --swa-full-tokens-ratio --tbo-token-distribution-threshold
    --tensor-parallel-size --tokenizer-metrics-allowed-custom-labels --tokenizer-metrics-custom-labels-header
    --tokenizer-mode --tokenizer-path --tokenizer-worker-num --tool-call-parser --tool-server --torch-compile-max-bs
    --torchao-config --tp-size --triton-attention-num-kv-splits --triton-attention-reduce-in-fp32
    --triton-attention-split-tile-size --trust-remote-code --warmups --watchdog-timeout --weight-loader-disable-mmap
    --weight-version
""".split())


# sglang-router 0.2.0 (PyPI wheel): sglang_router/router_args.py, RouterArgs.add_cli_args(use_router_prefix=False);
# the flags of python -m sglang_router.launch_router
SGLANG_ROUTER_0_2_0 = frozenset("""
    --api-key --backend --balance-abs-threshold --balance-rel-threshold --cache-threshold --cb-failure-threshold
    --cb-success-threshold --cb-timeout-duration-secs --cb-window-duration-secs --chat-template --cors-allowed-origins
    --decode --decode-policy --decode-selector --disable-circuit-breaker --disable-retries --dp-aware --enable-igw
    --eviction-interval-secs --health-check-endpoint --health-check-interval-secs --health-check-timeout-secs
    --health-failure-threshold --health-success-threshold --history-backend --host --log-dir --log-level
    --max-concurrent-requests --max-payload-size --max-tree-size --mini-lb --model-path --oracle-connect-descriptor
    --oracle-password --oracle-pool-max --oracle-pool-min --oracle-pool-timeout-secs --oracle-tns-alias
    --oracle-username --oracle-wallet-path --pd-disaggregation --policy --port --prefill --prefill-policy
    --prefill-selector --prometheus-host --prometheus-port --queue-size --queue-timeout-secs
    --rate-limit-tokens-per-second --reasoning-parser --request-id-headers --request-timeout-secs
    --retry-backoff-multiplier --retry-initial-backoff-ms --retry-jitter-factor --retry-max-backoff-ms
    --retry-max-retries --selector --service-discovery --service-discovery-namespace --service-discovery-port
    --tokenizer-path --tool-call-parser --worker-startup-check-interval --worker-startup-timeout-secs --worker-urls
""".split())


# vllm 0.11.0 (PyPI wheel vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl): vllm/engine/arg_utils.py EngineArgs.add_cli_args,
# the fields of vllm/entrypoints/openai/cli_args.py FrontendArgs (make_arg_parser adds each as --field-name) and
# vllm/entrypoints/cli/serve.py; the flags of vllm serve
VLLM_0_11_0 = frozenset("""
    --additional-config --allow-credentials --allowed-headers --allowed-local-media-path --allowed-media-domains
    --allowed-methods --allowed-origins --api-key --api-server-count --async-scheduling --block-size
    --calculate-kv-scales --chat-template --chat-template-content-format --code-revision --collect-detailed-traces
    --compilation-config --config --config-format --convert --cpu-offload-gb --cuda-graph-sizes --data-parallel-address
    --data-parallel-backend --data-parallel-hybrid-lb --data-parallel-rank --data-parallel-rpc-port --data-parallel-size
    --data-parallel-size-local --data-parallel-start-rank --dbo-decode-token-threshold --dbo-prefill-token-threshold
    --decode-context-parallel-size --default-mm-loras --disable-cascade-attn --disable-chunked-mm-input
    --disable-custom-all-reduce --disable-fastapi-docs --disable-frontend-multiprocessing
    --disable-hybrid-kv-cache-manager --disable-log-requests --disable-log-stats --disable-mm-preprocessor-cache
    --disable-sliding-window --disable-uvicorn-access-log --distributed-executor-backend --download-dir --dtype
    --enable-auto-tool-choice --enable-chunked-prefill --enable-dbo --enable-eplb --enable-expert-parallel
    --enable-force-include-usage --enable-log-outputs --enable-log-requests --enable-lora --enable-lora-bias
    --enable-multimodal-encoder-data-parallel --enable-prefix-caching --enable-prompt-embeds
    --enable-prompt-tokens-details --enable-request-id-headers --enable-server-load-tracking --enable-sleep-mode
    --enable-ssl-refresh --enable-tokenizer-info-endpoint --enforce-eager --eplb-config --eplb-log-balancedness
    --eplb-step-interval --eplb-window-size --exclude-tools-when-tool-choice-none --expert-placement-strategy
    --fully-sharded-loras --generation-config --gpu-memory-utilization --h11-max-header-count
    --h11-max-incomplete-event-size --headless --hf-config-path --hf-overrides --hf-token --host --ignore-patterns
    --interleave-mm-strings --io-processor-plugin --kv-cache-dtype --kv-cache-memory-bytes --kv-events-config
    --kv-sharing-fast-prefill --kv-transfer-config --limit-mm-per-prompt --load-format --log-config-file
    --log-error-stack --logits-processor-pattern --logits-processors --logprobs-mode --long-prefill-token-threshold
    --lora-dtype --lora-extra-vocab-size --lora-modules --mamba-cache-dtype --mamba-ssm-cache-dtype --max-cpu-loras
    --max-log-len --max-logprobs --max-long-partial-prefills --max-lora-rank --max-loras --max-model-len
    --max-num-batched-tokens --max-num-partial-prefills --max-num-seqs --max-parallel-loading-workers --media-io-kwargs
    --middleware --mm-encoder-tp-mode --mm-processor-cache-gb --mm-processor-cache-type --mm-processor-kwargs
    --mm-shm-cache-max-object-size-mb --model --model-impl --model-loader-extra-config --num-gpu-blocks-override
    --num-lookahead-slots --num-redundant-experts --otlp-traces-endpoint --override-attention-dtype
    --override-generation-config --override-pooler-config --pipeline-parallel-size --pooler-config --port
    --prefix-caching-hash-algo --pt-load-map-location --quantization --ray-workers-use-nsight --reasoning-parser
    --response-role --return-tokens-as-token-ids --revision --root-path --rope-scaling --rope-theta --runner
    --safetensors-load-strategy --scheduler-cls --scheduling-policy --seed --served-model-name
    --show-hidden-metrics-for-version --skip-mm-profiling --skip-tokenizer-init --speculative-config --ssl-ca-certs
    --ssl-cert-reqs --ssl-certfile --ssl-keyfile --structured-outputs-config --swap-space --task --tensor-parallel-size
    --tokenizer --tokenizer-mode --tokenizer-revision --tool-call-parser --tool-parser-plugin --tool-server
    --trust-remote-code --trust-request-chat-template --uds --use-tqdm-on-load --uvicorn-log-level --video-pruning-rate
    --worker-cls --worker-extension-cls
""".split())


# vLLM's P/D proxy, tests/v1/kv_connector/nixl_integration/toy_proxy_server.py in vllm-project/vllm (parse_args)
VLLM_TOY_PROXY = frozenset("--host --port --prefiller-hosts --prefiller-ports --decoder-hosts --decoder-ports".split())
