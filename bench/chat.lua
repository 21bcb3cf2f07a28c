-- wrk script: POST a small OpenAI chat request with an API key, and print a JSON
-- summary line that bench/gateway.py parses (wrk's text output is for humans).
--
--   wrk -t1 -c32 -d10s --latency -s bench/chat.lua http://127.0.0.1:PORT -- sk-KEY MODEL
--
-- No response() callback on purpose: defining one makes wrk parse every body, which
-- would cost CPU that the gateway and the baseline share with it.

local key, model = nil, "bench-chat"
local req

function init(args)
    key = args[1]
    model = args[2] or model
    wrk.method = "POST"
    wrk.path = "/v1/chat/completions"
    wrk.headers["Content-Type"] = "application/json"
    if key and key ~= "" then
        wrk.headers["Authorization"] = "Bearer " .. key
    end
    wrk.body = '{"model":"' .. model .. '","messages":[{"role":"user",'
        .. '"content":"Say hello to the benchmark."}],"max_tokens":16}'
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
