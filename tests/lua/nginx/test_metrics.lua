-- sluice.metrics: counters and histograms buffered per worker and added into the
-- shared dict on flush, gauges straight in, the text exposition format rendered.
local metrics = require("sluice.metrics")

local T = {}

local seq = 0
-- a family name no other test uses
local function fresh(kind)
    seq = seq + 1
    return "sluice_test_" .. kind .. "_" .. seq .. "_" .. ngx.worker.pid()
end

-- The rendered lines that start with `prefix`, in order.
local function lines(prefix)
    local out = {}
    for line in metrics.render():gmatch("[^\n]+") do
        if line:sub(1, #prefix) == prefix then
            out[#out + 1] = line
        end
    end
    return out
end

function T.counter_adds_after_a_flush()
    local name = fresh("total")
    metrics.register(name, "counter", "A test counter.", { "model", "status" })
    metrics.inc(name, 1, "chat", 200)
    metrics.inc(name, 2, "chat", 200)
    metrics.inc(name, nil, "chat", 503)
    -- buffered: nothing in the dict before the flush
    local key_count = #ngx.shared.sluice_metrics:get_keys(0)
    metrics.flush()
    assert(#ngx.shared.sluice_metrics:get_keys(0) == key_count + 2)
    local got = lines(name)
    assert(#got == 2, table.concat(got, "\n"))
    assert(got[1] == name .. '{model="chat",status="200"} 3', got[1])
    assert(got[2] == name .. '{model="chat",status="503"} 1', got[2])
    local head = lines("# TYPE " .. name)
    assert(head[1] == "# TYPE " .. name .. " counter", head[1])
    assert(lines("# HELP " .. name)[1] == "# HELP " .. name .. " A test counter.")
end

function T.render_flushes_this_workers_buffer()
    local name = fresh("total")
    metrics.register(name, "counter", "Another.", { "model" })
    metrics.inc(name, 5, "m")
    assert(lines(name)[1] == name .. '{model="m"} 5', "render did not flush first")
end

function T.gauge_is_set_not_added()
    local name = fresh("gauge")
    metrics.register(name, "gauge", "A test gauge.", { "backend" })
    metrics.set(name, 7, "b1")
    metrics.set(name, 3, "b1")
    assert(lines(name)[1] == name .. '{backend="b1"} 3', lines(name)[1])
end

function T.histogram_buckets_are_cumulative_with_sum_and_count()
    local name = fresh("seconds")
    metrics.register(name, "histogram", "A test histogram.", { "model" }, { 0.1, 1, 10 })
    for _, v in ipairs({ 0.05, 0.1, 0.5, 2, 20 }) do
        metrics.observe(name, v, "m")
    end
    local got = lines(name)
    local want = { name .. '_bucket{model="m",le="0.1"} 2', name .. '_bucket{model="m",le="1"} 3',
                   name .. '_bucket{model="m",le="10"} 4', name .. '_bucket{model="m",le="+Inf"} 5',
                   name .. '_sum{model="m"} 22.65', name .. '_count{model="m"} 5' }
    assert(#got == #want, table.concat(got, "\n"))
    for i = 1, #want do
        assert(got[i] == want[i], got[i] .. " ~= " .. want[i])
    end
end

function T.default_histogram_buckets_are_latency_buckets()
    local name = fresh("seconds")
    metrics.register(name, "histogram", "Latency.", {})
    metrics.observe(name, 0.003)
    local got = lines(name .. "_bucket")
    assert(#got == 14, #got)   -- 13 bounds and +Inf
    assert(got[1] == name .. '_bucket{le="0.005"} 1', got[1])
    assert(got[14] == name .. '_bucket{le="+Inf"} 1', got[14])
end

function T.label_values_are_escaped()
    local name = fresh("total")
    metrics.register(name, "counter", "Escaping.", { "model" })
    metrics.inc(name, 1, 'a"b\\c\nd')
    local got = lines(name)
    assert(got[1] == name .. '{model="a\\"b\\\\c?d"} 1', got[1])
    assert(metrics.escape("plain") == "plain")
end

function T.missing_labels_read_as_empty()
    local name = fresh("total")
    metrics.register(name, "counter", "Two labels.", { "model", "backend" })
    metrics.inc(name, 1, "m")
    assert(lines(name)[1] == name .. '{model="m",backend=""} 1', lines(name)[1])
end

function T.wrong_use_is_an_error()
    local ok, err = pcall(metrics.inc, "sluice_no_such_metric_family", 1)
    assert(not ok and err:find("unknown metric sluice_no_such_metric_family", 1, true), err)
    ok, err = pcall(metrics.register, "bad name", "counter", "x", {})
    assert(not ok and err:find("metric name must match", 1, true), err)
    ok, err = pcall(metrics.register, fresh("x"), "summary", "x", {})
    assert(not ok and err:find("counter, gauge or histogram", 1, true), err)
    ok, err = pcall(metrics.register, fresh("x"), "counter", "x", { "a", "b", "c", "d", "e" })
    assert(not ok and err:find("at most 4 labels", 1, true), err)
end

function T.on_flush_runs_other_buffers_with_each_flush()
    local n = 0
    metrics.on_flush(function() n = n + 1 end)
    metrics.flush()
    metrics.render()
    assert(n == 2, n)
end

return T
