-- wrk script: POST a small KServe v2 infer request, the model named by the path
-- (/v2/models/MODEL/infer), with an API key; prints the same JSON summary line as
-- chat.lua, which bench/gateway.py parses (targets sluice-path and baseline-path).
--
--   wrk -t1 -c32 -d10s --latency -s bench/v2_infer.lua http://127.0.0.1:PORT -- sk-KEY MODEL
--
--   ... -- sk-KEY MODEL VALUES
--
-- VALUES: the input tensor's size (default 4: a body of ~100 bytes, about chat.lua's,
-- so the two targets differ in where the model name is, not in bytes moved; 8192
-- makes a ~57 KB body, where decoding it or not shows).

local req

function init(args)
    local key = args[1]
    local model = args[2] or "bench-v2"
    local n = tonumber(args[3]) or 4
    wrk.method = "POST"
    wrk.path = "/v2/models/" .. model .. "/infer"
    wrk.headers["Content-Type"] = "application/json"
    if key and key ~= "" then
        wrk.headers["Authorization"] = "Bearer " .. key
    end
    local data = {}
    for i = 1, n do
        data[i] = string.format("%.4f", i / n)
    end
    wrk.body = '{"id":"bench","inputs":[{"name":"x","shape":[1,' .. n .. '],'
        .. '"datatype":"FP32","data":[' .. table.concat(data, ",") .. ']}]}'
    req = wrk.format()
end

function request()
    return req
end

function done(summary, latency, _)
    local e = summary.errors
    io.write(string.format(
        'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,'
        .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
        .. '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
        summary.requests, summary.duration, summary.bytes,
        e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(50), latency:percentile(90), latency:percentile(99),
        latency.max, latency.mean))
end
