from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("name", "shape", "dtype", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    data: bytes
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("model", "application", "variant", "batch_size", "inputs", "latency_slo_ms", "min_accuracy", "idempotency_key")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SLO_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model: str
    application: str
    variant: str
    batch_size: int
    inputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    latency_slo_ms: float
    min_accuracy: float
    idempotency_key: str
    def __init__(self, model: _Optional[str] = ..., application: _Optional[str] = ..., variant: _Optional[str] = ..., batch_size: _Optional[int] = ..., inputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., latency_slo_ms: _Optional[float] = ..., min_accuracy: _Optional[float] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SubmitReply(_message.Message):
    __slots__ = ("outputs", "model", "variant", "instance_id", "instance_type", "queue_ms", "service_ms", "total_ms", "slo_met", "provider", "accuracy")
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    SLO_MET_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    model: str
    variant: str
    instance_id: str
    instance_type: str
    queue_ms: float
    service_ms: float
    total_ms: float
    slo_met: bool
    provider: str
    accuracy: float
    def __init__(self, outputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., model: _Optional[str] = ..., variant: _Optional[str] = ..., instance_id: _Optional[str] = ..., instance_type: _Optional[str] = ..., queue_ms: _Optional[float] = ..., service_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., slo_met: _Optional[bool] = ..., provider: _Optional[str] = ..., accuracy: _Optional[float] = ...) -> None: ...

class RegisterModelRequest(_message.Message):
    __slots__ = ("name", "application", "onnx", "onnx_uri", "validation_uri", "qos_ms", "max_batch", "validation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    ONNX_FIELD_NUMBER: _ClassVar[int]
    ONNX_URI_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_URI_FIELD_NUMBER: _ClassVar[int]
    QOS_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    application: str
    onnx: bytes
    onnx_uri: str
    validation_uri: str
    qos_ms: float
    max_batch: int
    validation: bytes
    def __init__(self, name: _Optional[str] = ..., application: _Optional[str] = ..., onnx: _Optional[bytes] = ..., onnx_uri: _Optional[str] = ..., validation_uri: _Optional[str] = ..., qos_ms: _Optional[float] = ..., max_batch: _Optional[int] = ..., validation: _Optional[bytes] = ...) -> None: ...

class RegisterModelReply(_message.Message):
    __slots__ = ("name", "variants")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    variants: _containers.RepeatedCompositeFieldContainer[VariantInfo]
    def __init__(self, name: _Optional[str] = ..., variants: _Optional[_Iterable[_Union[VariantInfo, _Mapping]]] = ...) -> None: ...

class VariantInfo(_message.Message):
    __slots__ = ("name", "model", "application", "precision", "hardware", "provider", "tuned_batch", "accuracy", "accuracy_estimated", "state", "instances")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    TUNED_BATCH_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    model: str
    application: str
    precision: str
    hardware: str
    provider: str
    tuned_batch: int
    accuracy: float
    accuracy_estimated: bool
    state: str
    instances: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., model: _Optional[str] = ..., application: _Optional[str] = ..., precision: _Optional[str] = ..., hardware: _Optional[str] = ..., provider: _Optional[str] = ..., tuned_batch: _Optional[int] = ..., accuracy: _Optional[float] = ..., accuracy_estimated: _Optional[bool] = ..., state: _Optional[str] = ..., instances: _Optional[_Iterable[str]] = ...) -> None: ...

class ListVariantsRequest(_message.Message):
    __slots__ = ("model", "application")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    model: str
    application: str
    def __init__(self, model: _Optional[str] = ..., application: _Optional[str] = ...) -> None: ...

class ListVariantsReply(_message.Message):
    __slots__ = ("variants",)
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    variants: _containers.RepeatedCompositeFieldContainer[VariantInfo]
    def __init__(self, variants: _Optional[_Iterable[_Union[VariantInfo, _Mapping]]] = ...) -> None: ...

class OfflineJobRequest(_message.Message):
    __slots__ = ("model", "application", "input_uri", "output_uri", "min_accuracy", "input")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    INPUT_URI_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_URI_FIELD_NUMBER: _ClassVar[int]
    MIN_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    model: str
    application: str
    input_uri: str
    output_uri: str
    min_accuracy: float
    input: bytes
    def __init__(self, model: _Optional[str] = ..., application: _Optional[str] = ..., input_uri: _Optional[str] = ..., output_uri: _Optional[str] = ..., min_accuracy: _Optional[float] = ..., input: _Optional[bytes] = ...) -> None: ...

class OfflineJobReply(_message.Message):
    __slots__ = ("job_id", "state", "done", "total", "message", "output")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: str
    done: int
    total: int
    message: str
    output: bytes
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ..., message: _Optional[str] = ..., output: _Optional[bytes] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InstanceCount(_message.Message):
    __slots__ = ("instance_type", "state", "count", "market", "zone")
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MARKET_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    instance_type: str
    state: str
    count: int
    market: str
    zone: str
    def __init__(self, instance_type: _Optional[str] = ..., state: _Optional[str] = ..., count: _Optional[int] = ..., market: _Optional[str] = ..., zone: _Optional[str] = ...) -> None: ...

class ModelWindow(_message.Message):
    __slots__ = ("seconds", "demand_qps", "queries", "slo_met", "attainment", "served_accuracy")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    DEMAND_QPS_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    SLO_MET_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    SERVED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    seconds: int
    demand_qps: float
    queries: int
    slo_met: int
    attainment: float
    served_accuracy: float
    def __init__(self, seconds: _Optional[int] = ..., demand_qps: _Optional[float] = ..., queries: _Optional[int] = ..., slo_met: _Optional[int] = ..., attainment: _Optional[float] = ..., served_accuracy: _Optional[float] = ...) -> None: ...

class ModelStatus(_message.Message):
    __slots__ = ("name", "windows", "queries", "slo_violations", "workers", "planned", "planned_qps", "capacity_qps", "short_qps", "forecast_qps", "forecaster")
    class QueriesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    SLO_VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    PLANNED_FIELD_NUMBER: _ClassVar[int]
    PLANNED_QPS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_QPS_FIELD_NUMBER: _ClassVar[int]
    SHORT_QPS_FIELD_NUMBER: _ClassVar[int]
    FORECAST_QPS_FIELD_NUMBER: _ClassVar[int]
    FORECASTER_FIELD_NUMBER: _ClassVar[int]
    name: str
    windows: _containers.RepeatedCompositeFieldContainer[ModelWindow]
    queries: _containers.ScalarMap[str, int]
    slo_violations: int
    workers: int
    planned: bool
    planned_qps: float
    capacity_qps: float
    short_qps: float
    forecast_qps: float
    forecaster: str
    def __init__(self, name: _Optional[str] = ..., windows: _Optional[_Iterable[_Union[ModelWindow, _Mapping]]] = ..., queries: _Optional[_Mapping[str, int]] = ..., slo_violations: _Optional[int] = ..., workers: _Optional[int] = ..., planned: _Optional[bool] = ..., planned_qps: _Optional[float] = ..., capacity_qps: _Optional[float] = ..., short_qps: _Optional[float] = ..., forecast_qps: _Optional[float] = ..., forecaster: _Optional[str] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("instance_id", "instance_type", "state", "variants", "utilization", "served", "model")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    instance_type: str
    state: str
    variants: _containers.RepeatedScalarFieldContainer[str]
    utilization: float
    served: int
    model: str
    def __init__(self, instance_id: _Optional[str] = ..., instance_type: _Optional[str] = ..., state: _Optional[str] = ..., variants: _Optional[_Iterable[str]] = ..., utilization: _Optional[float] = ..., served: _Optional[int] = ..., model: _Optional[str] = ...) -> None: ...

class DecisionRecord(_message.Message):
    __slots__ = ("at_unix", "loop", "kind", "summary", "reason")
    AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    LOOP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at_unix: float
    loop: str
    kind: str
    summary: str
    reason: str
    def __init__(self, at_unix: _Optional[float] = ..., loop: _Optional[str] = ..., kind: _Optional[str] = ..., summary: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DecisionCount(_message.Message):
    __slots__ = ("loop", "kind", "count")
    LOOP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    loop: str
    kind: str
    count: int
    def __init__(self, loop: _Optional[str] = ..., kind: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class ProfilingStatus(_message.Message):
    __slots__ = ("model", "conservative_pool", "reason", "types_left", "probing", "on_conservative_pool")
    class ConservativePoolEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSERVATIVE_POOL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TYPES_LEFT_FIELD_NUMBER: _ClassVar[int]
    PROBING_FIELD_NUMBER: _ClassVar[int]
    ON_CONSERVATIVE_POOL_FIELD_NUMBER: _ClassVar[int]
    model: str
    conservative_pool: _containers.ScalarMap[str, int]
    reason: str
    types_left: _containers.RepeatedScalarFieldContainer[str]
    probing: bool
    on_conservative_pool: bool
    def __init__(self, model: _Optional[str] = ..., conservative_pool: _Optional[_Mapping[str, int]] = ..., reason: _Optional[str] = ..., types_left: _Optional[_Iterable[str]] = ..., probing: _Optional[bool] = ..., on_conservative_pool: _Optional[bool] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("cluster", "budget_per_hour", "cost_per_hour", "pool", "queued", "served", "rejected", "arrival_qps", "workers", "parked", "instances", "spent_usd_today", "spent_usd_total", "models", "worker_list", "decisions", "decision_counts", "last_error", "last_error_at_unix", "in_flight", "capacity_hint", "now_unix", "daemon", "profiling", "cost_per_hour_by_market", "replica", "forecast_mode", "forecast_lead_s", "forecast_shadow")
    class PoolEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class CostPerHourByMarketEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BUDGET_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    COST_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_QPS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    PARKED_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    SPENT_USD_TODAY_FIELD_NUMBER: _ClassVar[int]
    SPENT_USD_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    WORKER_LIST_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_COUNTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_HINT_FIELD_NUMBER: _ClassVar[int]
    NOW_UNIX_FIELD_NUMBER: _ClassVar[int]
    DAEMON_FIELD_NUMBER: _ClassVar[int]
    PROFILING_FIELD_NUMBER: _ClassVar[int]
    COST_PER_HOUR_BY_MARKET_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    FORECAST_MODE_FIELD_NUMBER: _ClassVar[int]
    FORECAST_LEAD_S_FIELD_NUMBER: _ClassVar[int]
    FORECAST_SHADOW_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    budget_per_hour: float
    cost_per_hour: float
    pool: _containers.ScalarMap[str, int]
    queued: int
    served: int
    rejected: int
    arrival_qps: float
    workers: int
    parked: int
    instances: _containers.RepeatedCompositeFieldContainer[InstanceCount]
    spent_usd_today: float
    spent_usd_total: float
    models: _containers.RepeatedCompositeFieldContainer[ModelStatus]
    worker_list: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    decisions: _containers.RepeatedCompositeFieldContainer[DecisionRecord]
    decision_counts: _containers.RepeatedCompositeFieldContainer[DecisionCount]
    last_error: str
    last_error_at_unix: float
    in_flight: int
    capacity_hint: float
    now_unix: float
    daemon: bool
    profiling: _containers.RepeatedCompositeFieldContainer[ProfilingStatus]
    cost_per_hour_by_market: _containers.ScalarMap[str, float]
    replica: ReplicaStatus
    forecast_mode: str
    forecast_lead_s: float
    forecast_shadow: ForecastShadow
    def __init__(self, cluster: _Optional[str] = ..., budget_per_hour: _Optional[float] = ..., cost_per_hour: _Optional[float] = ..., pool: _Optional[_Mapping[str, int]] = ..., queued: _Optional[int] = ..., served: _Optional[int] = ..., rejected: _Optional[int] = ..., arrival_qps: _Optional[float] = ..., workers: _Optional[int] = ..., parked: _Optional[int] = ..., instances: _Optional[_Iterable[_Union[InstanceCount, _Mapping]]] = ..., spent_usd_today: _Optional[float] = ..., spent_usd_total: _Optional[float] = ..., models: _Optional[_Iterable[_Union[ModelStatus, _Mapping]]] = ..., worker_list: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., decisions: _Optional[_Iterable[_Union[DecisionRecord, _Mapping]]] = ..., decision_counts: _Optional[_Iterable[_Union[DecisionCount, _Mapping]]] = ..., last_error: _Optional[str] = ..., last_error_at_unix: _Optional[float] = ..., in_flight: _Optional[int] = ..., capacity_hint: _Optional[float] = ..., now_unix: _Optional[float] = ..., daemon: _Optional[bool] = ..., profiling: _Optional[_Iterable[_Union[ProfilingStatus, _Mapping]]] = ..., cost_per_hour_by_market: _Optional[_Mapping[str, float]] = ..., replica: _Optional[_Union[ReplicaStatus, _Mapping]] = ..., forecast_mode: _Optional[str] = ..., forecast_lead_s: _Optional[float] = ..., forecast_shadow: _Optional[_Union[ForecastShadow, _Mapping]] = ...) -> None: ...

class ForecastShadow(_message.Message):
    __slots__ = ("ahead_usd_per_hr", "applied_usd_per_hr", "ahead_usd", "applied_usd", "ahead_served_pct", "applied_served_pct")
    AHEAD_USD_PER_HR_FIELD_NUMBER: _ClassVar[int]
    APPLIED_USD_PER_HR_FIELD_NUMBER: _ClassVar[int]
    AHEAD_USD_FIELD_NUMBER: _ClassVar[int]
    APPLIED_USD_FIELD_NUMBER: _ClassVar[int]
    AHEAD_SERVED_PCT_FIELD_NUMBER: _ClassVar[int]
    APPLIED_SERVED_PCT_FIELD_NUMBER: _ClassVar[int]
    ahead_usd_per_hr: float
    applied_usd_per_hr: float
    ahead_usd: float
    applied_usd: float
    ahead_served_pct: float
    applied_served_pct: float
    def __init__(self, ahead_usd_per_hr: _Optional[float] = ..., applied_usd_per_hr: _Optional[float] = ..., ahead_usd: _Optional[float] = ..., applied_usd: _Optional[float] = ..., ahead_served_pct: _Optional[float] = ..., applied_served_pct: _Optional[float] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("id", "lease_holder", "live", "owners", "releasing", "forwarding_to", "owners_version")
    class OwnersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ReleasingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    RELEASING_FIELD_NUMBER: _ClassVar[int]
    FORWARDING_TO_FIELD_NUMBER: _ClassVar[int]
    OWNERS_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_holder: bool
    live: _containers.RepeatedScalarFieldContainer[str]
    owners: _containers.ScalarMap[str, str]
    releasing: _containers.ScalarMap[str, str]
    forwarding_to: str
    owners_version: int
    def __init__(self, id: _Optional[str] = ..., lease_holder: _Optional[bool] = ..., live: _Optional[_Iterable[str]] = ..., owners: _Optional[_Mapping[str, str]] = ..., releasing: _Optional[_Mapping[str, str]] = ..., forwarding_to: _Optional[str] = ..., owners_version: _Optional[int] = ...) -> None: ...

class SubmitCall(_message.Message):
    __slots__ = ("call_id", "request", "timeout_ms", "cancel")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    request: SubmitRequest
    timeout_ms: float
    cancel: bool
    def __init__(self, call_id: _Optional[int] = ..., request: _Optional[_Union[SubmitRequest, _Mapping]] = ..., timeout_ms: _Optional[float] = ..., cancel: _Optional[bool] = ...) -> None: ...

class SubmitResult(_message.Message):
    __slots__ = ("call_id", "reply", "code", "message")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    reply: SubmitReply
    code: int
    message: str
    def __init__(self, call_id: _Optional[int] = ..., reply: _Optional[_Union[SubmitReply, _Mapping]] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("instance_id", "instance_type", "address", "token", "providers", "executor", "costscale_version", "protocol_version")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    COSTSCALE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    instance_type: str
    address: str
    token: str
    providers: _containers.RepeatedScalarFieldContainer[str]
    executor: str
    costscale_version: str
    protocol_version: int
    def __init__(self, instance_id: _Optional[str] = ..., instance_type: _Optional[str] = ..., address: _Optional[str] = ..., token: _Optional[str] = ..., providers: _Optional[_Iterable[str]] = ..., executor: _Optional[str] = ..., costscale_version: _Optional[str] = ..., protocol_version: _Optional[int] = ...) -> None: ...

class RegisterWorkerReply(_message.Message):
    __slots__ = ("accepted", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class SpotNoticeRequest(_message.Message):
    __slots__ = ("instance_id", "token", "kind", "action", "reclaim_at_unix")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RECLAIM_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    token: str
    kind: str
    action: str
    reclaim_at_unix: float
    def __init__(self, instance_id: _Optional[str] = ..., token: _Optional[str] = ..., kind: _Optional[str] = ..., action: _Optional[str] = ..., reclaim_at_unix: _Optional[float] = ...) -> None: ...

class SpotNoticeReply(_message.Message):
    __slots__ = ("accepted", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class InferRequest(_message.Message):
    __slots__ = ("query_id", "model", "variant", "batch_size", "inputs")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    model: str
    variant: str
    batch_size: int
    inputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, query_id: _Optional[str] = ..., model: _Optional[str] = ..., variant: _Optional[str] = ..., batch_size: _Optional[int] = ..., inputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class InferReply(_message.Message):
    __slots__ = ("outputs", "service_ms", "compute_ms", "provider", "variant")
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_MS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_MS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    service_ms: float
    compute_ms: float
    provider: str
    variant: str
    def __init__(self, outputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., service_ms: _Optional[float] = ..., compute_ms: _Optional[float] = ..., provider: _Optional[str] = ..., variant: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthReply(_message.Message):
    __slots__ = ("instance_id", "instance_type", "providers", "executor", "emulated", "in_flight", "loaded_variants", "served", "peak_in_flight")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    EMULATED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    LOADED_VARIANTS_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    PEAK_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    instance_type: str
    providers: _containers.RepeatedScalarFieldContainer[str]
    executor: str
    emulated: bool
    in_flight: int
    loaded_variants: _containers.RepeatedScalarFieldContainer[str]
    served: int
    peak_in_flight: int
    def __init__(self, instance_id: _Optional[str] = ..., instance_type: _Optional[str] = ..., providers: _Optional[_Iterable[str]] = ..., executor: _Optional[str] = ..., emulated: _Optional[bool] = ..., in_flight: _Optional[int] = ..., loaded_variants: _Optional[_Iterable[str]] = ..., served: _Optional[int] = ..., peak_in_flight: _Optional[int] = ...) -> None: ...

class VariantRequest(_message.Message):
    __slots__ = ("model", "variant", "onnx", "onnx_path", "speed_factor")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    ONNX_FIELD_NUMBER: _ClassVar[int]
    ONNX_PATH_FIELD_NUMBER: _ClassVar[int]
    SPEED_FACTOR_FIELD_NUMBER: _ClassVar[int]
    model: str
    variant: str
    onnx: bytes
    onnx_path: str
    speed_factor: float
    def __init__(self, model: _Optional[str] = ..., variant: _Optional[str] = ..., onnx: _Optional[bytes] = ..., onnx_path: _Optional[str] = ..., speed_factor: _Optional[float] = ...) -> None: ...

class VariantReply(_message.Message):
    __slots__ = ("ok", "message", "load_ms")
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    message: str
    load_ms: float
    def __init__(self, ok: _Optional[bool] = ..., message: _Optional[str] = ..., load_ms: _Optional[float] = ...) -> None: ...

class InferCall(_message.Message):
    __slots__ = ("query_id", "model", "variant", "batch_size", "inputs", "call_id", "timeout_ms", "cancel")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    model: str
    variant: str
    batch_size: int
    inputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    call_id: int
    timeout_ms: float
    cancel: bool
    def __init__(self, query_id: _Optional[str] = ..., model: _Optional[str] = ..., variant: _Optional[str] = ..., batch_size: _Optional[int] = ..., inputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., call_id: _Optional[int] = ..., timeout_ms: _Optional[float] = ..., cancel: _Optional[bool] = ...) -> None: ...

class InferResult(_message.Message):
    __slots__ = ("outputs", "service_ms", "compute_ms", "provider", "variant", "call_id", "code", "message")
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_MS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_MS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[Tensor]
    service_ms: float
    compute_ms: float
    provider: str
    variant: str
    call_id: int
    code: int
    message: str
    def __init__(self, outputs: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., service_ms: _Optional[float] = ..., compute_ms: _Optional[float] = ..., provider: _Optional[str] = ..., variant: _Optional[str] = ..., call_id: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...
