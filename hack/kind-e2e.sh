#!/usr/bin/env bash
# End-to-end check of Bellows on a local kind cluster. NOT run in CI: it needs Docker, kind,
# kubectl and network access (operator manifests, base images).
#
#   1. create a kind cluster and advertise 4 fake nvidia.com/gpu on its node (Kubernetes
#      "extended resources": nothing uses a device, the training image runs on CPU);
#   2. install the Kubeflow training-operator;
#   3. build the Bellows image and a CPU training image (examples/training), load both;
#   4. install the quickstart overlay (bundled NATS) with a fixed 4-GPU budget;
#   5. submit a suspended, opted-in PyTorchJob and wait until Bellows starts it and it
#      succeeds.
#
# Environment: CLUSTER (default bellows-e2e), TRAINING_OPERATOR_REF (v1.9.4),
# KEEP_CLUSTER=1 to keep the cluster, TIMEOUT (seconds to wait for the job, 900).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${CLUSTER:-bellows-e2e}"
TRAINING_OPERATOR_REF="${TRAINING_OPERATOR_REF:-v1.9.4}"
TIMEOUT="${TIMEOUT:-900}"
NAMESPACE=bellows-system
JOB_NAMESPACE=bellows-e2e
WORK="$(mktemp -d)"

for tool in docker kind kubectl; do
  command -v "$tool" > /dev/null || { echo "kind-e2e: $tool is required" >&2; exit 2; }
done

cleanup() {
  rm -rf "$WORK"
  if [[ "${KEEP_CLUSTER:-0}" != 1 ]]; then kind delete cluster --name "$CLUSTER"; fi
}
trap cleanup EXIT

echo "== cluster"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER"
node="$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
kubectl patch node "$node" --subresource=status --type=json \
  -p '[{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"4"}]'

echo "== training-operator $TRAINING_OPERATOR_REF"
kubectl apply --server-side -k \
  "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=$TRAINING_OPERATOR_REF"
kubectl -n kubeflow wait --for=condition=Available deployment/training-operator --timeout=300s

echo "== images"
docker build -t bellows:0.1.0 .
cat > "$WORK/Dockerfile" <<'DOCKERFILE'
FROM python:3.11.11-slim-bookworm
RUN pip install --no-cache-dir torch==2.13.0
COPY elastic.py task.py pytorch_ddp.py /app/
USER 65532:65532
WORKDIR /app
DOCKERFILE
cp examples/training/elastic.py examples/training/task.py examples/training/pytorch_ddp.py "$WORK/"
docker build -t bellows-train:e2e "$WORK"
kind load docker-image --name "$CLUSTER" bellows:0.1.0 bellows-train:e2e

echo "== bellows (quickstart overlay, 4-GPU budget)"
hack/quickstart-credentials.sh  # the bundled NATS users' passwords (kept if present)
mkdir -p "$WORK/overlay"
cp manifests/overlays/quickstart/config.yaml "$WORK/overlay/config.yaml"
sed -i 's/^    gpus: 0$/    gpus: 4/' "$WORK/overlay/config.yaml"
cat > "$WORK/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $PWD/manifests/overlays/quickstart
configMapGenerator:
  - name: bellows-config
    namespace: $NAMESPACE
    behavior: replace
    files: [config.yaml]
YAML
kubectl apply -k "$WORK/overlay"
for d in bellows-nats bellows-bridge bellows-controller; do
  kubectl -n "$NAMESPACE" wait --for=condition=Available "deployment/$d" --timeout=300s
done

echo "== an elastic PyTorchJob"
kubectl create namespace "$JOB_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$JOB_NAMESPACE" apply -f - <<'YAML'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: checkpoints}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Mi}}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: elastic-mlp
  annotations:
    bellows.io/min-batch-size: "16"
    bellows.io/max-batch-size: "128"
    bellows.io/max-gpus: "4"
    bellows.io/max-batch-per-gpu: "64"
    bellows.io/work: "200000"
    bellows.io/batch-size-env: BELLOWS_GLOBAL_BATCH_SIZE
    bellows.io/profile: >-
      {"apiVersion": "bellows.io/v1alpha1", "kind": "JobProfile", "weights": 321,
       "step": [{"localBatch": 8, "seconds": 0.002}, {"localBatch": 64, "seconds": 0.004}]}
spec:
  runPolicy:
    suspend: true
  pytorchReplicaSpecs:
    # Master and Worker run the same pod: the Worker is a YAML alias of the Master.
    Master: &replica
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          securityContext: {fsGroup: 65532}
          containers:
            - name: pytorch
              image: bellows-train:e2e
              imagePullPolicy: Never
              command: [python, pytorch_ddp.py, --checkpoint-dir, /ckpt, --total-samples, "200000"]
              env: [{name: BELLOWS_GLOBAL_BATCH_SIZE, value: "32"}]
              resources: {limits: {nvidia.com/gpu: 1}}
              volumeMounts: [{name: ckpt, mountPath: /ckpt}]
          volumes: [{name: ckpt, persistentVolumeClaim: {claimName: checkpoints}}]
    Worker: *replica
YAML

echo "== waiting up to ${TIMEOUT}s for Bellows to start the job and for it to succeed"
deadline=$((SECONDS + TIMEOUT))
while (( SECONDS < deadline )); do
  status="$(kubectl -n "$JOB_NAMESPACE" get pytorchjob elastic-mlp \
    -o jsonpath='{.metadata.annotations.bellows\.io/status}{" | "}{.status.conditions[-1].type}')"
  echo "  $status"
  if [[ "$status" == *"| Succeeded" ]]; then
    kubectl -n "$JOB_NAMESPACE" get pytorchjob elastic-mlp \
      -o jsonpath='{.metadata.annotations.bellows\.io/allocation}{"\n"}'
    echo "kind-e2e: passed"
    exit 0
  fi
  if [[ "$status" == *"| Failed" ]]; then break; fi
  sleep 10
done
kubectl -n "$NAMESPACE" logs deployment/bellows-controller --tail=100 || true
echo "kind-e2e: the job did not succeed in time" >&2
exit 1
