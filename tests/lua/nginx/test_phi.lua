-- sluice.phi_classes / sluice.phi_scan / sluice.phi.scan_json inside nginx (ngx.re):
-- each class's detector on examples and near misses, the checksums, placeholders
-- (the same value the same way), block and log, JSON literals with escapes, and the
-- labelled corpus (tests/data/phi_corpus.jsonl) above a floor per class.
local cjson = require("cjson.safe")
local classes = require("sluice.phi_classes")
local scan = require("sluice.phi_scan")
local phi = require("sluice.phi")

local T = {}

local function state(policy)
    return { policy = policy, counts = {}, seen = {}, next = {} }
end

-- the hits of `text` scanned with every class, as "class=value" strings
local function found(text)
    local policy = scan.compile({ ["*"] = "log" })
    assert(scan.scan(text, policy, state(policy)))
    local out = {}
    for i, h in ipairs(scan.found()) do
        out[i] = h[1] .. "=" .. text:sub(h[2], h[3])
    end
    return table.concat(out, " ")
end

local function finds(text, expected)
    local got = found(text)
    assert(got == expected, ("%q: expected %q, got %q"):format(text, expected, got))
end

function T.each_class_on_an_example()
    finds("write to ann.lee@mail.example.org.", "email=ann.lee@mail.example.org")
    finds("see https://x.example/p?id=7, then", "url=https://x.example/p?id=7")
    finds("from 192.168.10.254 and fe80:0:0:0:202:b3ff:fe1e:8329",
          "ip=192.168.10.254 ip=fe80:0:0:0:202:b3ff:fe1e:8329")
    finds("MRN: 00451234", "mrn=00451234")
    finds("Member ID XJH4471982", "health_plan=XJH4471982")
    finds("account number 0012 3456 7890", "account=0012 3456 7890")
    finds("DEA number AB1234563", "license=AB1234563")
    finds("serial number SN-77812", "device=SN-77812")
    finds("fingerprint template FP991823", "biometric=FP991823")
    finds("VIN 1M8GDM9AXKP042788 recalled", "vehicle=1M8GDM9AXKP042788")
    finds("车牌号：京A12345", "vehicle=京A12345")
    finds("Patient ID: P12345", "other_id=P12345")
    finds("身份证号 11010519491231002X", "cn_resident_id=11010519491231002X")
    finds("手机 +86 139 1234 5678", "cn_mobile=+86 139 1234 5678")
    finds("card 4111 1111 1111 1111", "bank_card=4111 1111 1111 1111")
    finds("SSN 078-05-1120", "ssn=078-05-1120")
    finds("Fax: 415-555-0199", "fax=415-555-0199")
    finds("传真号码：010-66778899", "fax=010-66778899")
    finds("车牌：沪B12345", "vehicle=沪B12345")
    finds("call (415) 555-0100 or 010-12345678", "phone=(415) 555-0100 phone=010-12345678")
    finds("born March 5, 1960 and 1960年3月5日", "date=March 5, 1960 date=1960年3月5日")
    finds("lives at 12 Oak Street; ZIP code: 94110", "geo=12 Oak Street geo=94110")
    finds("Dr. Watson saw patient Mary Clark", "name=Watson name=Mary Clark")
    finds("姓名：王小明，请联系李先生", "name=王小明 name=李")
    finds("photo data:image/png;base64,iVBORw0KGgo=", "face_image=data:image/png;base64,iVBORw0KGgo=")
end

function T.near_misses_are_left_alone()
    finds("card 4111 1111 1111 1112 declined", "")            -- fails Luhn
    finds("身份证 110105194912310021 invalid", "")             -- wrong check digit
    finds("SSN-like 000-12-3456 and 666-12-3456", "")
    finds("order 123456 shipped, version 1.2.3", "")
    finds("the patient was tired", "")
    finds("MRN: pending", "")                                  -- a keyword with no number
end

function T.checksums()
    assert(classes.luhn("4111111111111111", 1, 16))
    assert(not classes.luhn("4111111111111112", 1, 16))
    assert(classes.cn_id("11010519491231002X", 1))
    assert(classes.cn_id("11010519491231002x", 1))
    assert(not classes.cn_id("110105194912310021", 1))
    assert(classes.vin_or_plate("1M8GDM9AXKP042788", 1, 17))
    assert(not classes.vin_or_plate("1M8GDM9A1KP042788", 1, 17))
end

function T.mask_gives_typed_placeholders_the_same_value_the_same_way()
    local policy = scan.compile({ ["*"] = "mask" })
    local st = state(policy)
    local out = scan.scan("a@b.co, c@d.co, a@b.co; SSN 078-05-1120", policy, st)
    assert(out == "[EMAIL_1], [EMAIL_2], [EMAIL_1]; SSN [SSN_1]", out)
    -- a later text of the same request keeps the numbering
    out = scan.scan("again c@d.co", policy, st)
    assert(out == "again [EMAIL_2]", out)
    assert(st.counts.email == 4 and st.counts.ssn == 1)
end

function T.block_names_the_class_and_log_only_counts()
    local policy = scan.compile({ ssn = "block", email = "log" })
    local st = state(policy)
    local out, blocked = scan.scan("x@y.io SSN 078-05-1120", policy, st)
    assert(out == "x@y.io SSN 078-05-1120" and blocked == "ssn")
    out, blocked = scan.scan("x@y.io only", policy, st)
    assert(out == "x@y.io only" and blocked == nil and st.counts.email == 2)
    -- classes the policy does not name (and no "*") are not scanned
    assert(scan.scan("call (415) 555-0100", policy, st) == "call (415) 555-0100")
    assert(st.counts.phone == nil)
end

function T.validate_and_compile()
    assert(scan.validate({ ssn = "mask", ["*"] = "log" }, "p") == nil)
    assert(scan.validate({ nope = "mask" }, "p") == "p.nope: unknown class")
    assert(scan.validate({ ssn = "drop" }, "p"):find("must be"))
    assert(scan.compile(nil) == nil and scan.compile({}) == nil)
    local c = scan.compile({ ssn = "block", ["*"] = "mask" })
    assert(#c == #classes.CLASSES)
    local only = scan.compile({ ssn = "log" })
    assert(#only == 1 and only[1].class.name == "ssn" and only[1].action == "log")
end

function T.json_literals_escaped_or_not()
    local policy = scan.compile({ ["*"] = "mask" })
    local st = state(policy)
    -- Python's json.dumps escapes Chinese; cjson does not: both are scanned
    local raw = '{"a":"SSN 078-05-1120","b":"\\u8eab\\u4efd\\u8bc1\\u53f7 11010519491231002X",'
        .. '"n":13912345678}'
    local out, blocked = phi.scan_json(raw, st)
    assert(blocked == nil)
    local doc = assert(cjson.decode(out))
    assert(doc.a == "SSN [SSN_1]", doc.a)
    assert(doc.b == "身份证号 [CN_ID_1]", doc.b)
    assert(doc.n == 13912345678)   -- numbers are not text
end

function T.a_dry_scan_cuts_before_a_value_and_sends_part_of_the_text()
    local policy = scan.compile({ ["*"] = "mask" })
    local st = state(policy)
    local text = "ok. Call (415) 555-0100 now"
    assert(scan.scan(text, policy, st, true) == text and st.counts.phone == nil)
    local hi = scan.cut(1, 15)            -- inside the number: cut before it
    assert(hi == 9, hi)
    local part = scan.apply(text, 1, hi, st)
    assert(part == "ok. Call " and st.counts.phone == nil)
    part = scan.apply(text, 10, #text, st)
    assert(part == "[PHONE_1] now" and st.counts.phone == 1, part)
end

-- path of the repository's tests/data, from where this file was found
local function corpus_path()
    local here = package.searchpath("test_phi", package.path)
    return (here:gsub("tests/lua/nginx/test_phi%.lua$", "tests/data/phi_corpus.jsonl"))
end

function T.corpus_recall_and_precision_per_class()
    local policy = scan.compile({ ["*"] = "log" })
    local tp, fp, fn = {}, {}, {}
    for line in io.lines(corpus_path()) do
        local row = cjson.decode(line)
        local hard = row.hard   -- known shortfalls (docs/phi.md): bench/phi.py scores them
        assert(scan.scan(row.text, policy, state(policy)))
        local hits, matched = scan.found(), {}
        for _, h in ipairs(hits) do
            local ok = false
            for i, lab in ipairs(row.labels) do
                local a, b = row.text:find(lab.value, 1, true)
                if lab.class == h[1] and h[2] <= b and h[3] >= a then
                    ok, matched[i] = true, true
                end
            end
            local t = ok and tp or fp
            if not hard then t[h[1]] = (t[h[1]] or 0) + 1 end
        end
        for i, lab in ipairs(row.labels) do
            if not matched[i] and not hard then fn[lab.class] = (fn[lab.class] or 0) + 1 end
        end
    end
    for _, c in ipairs(classes.CLASSES) do
        local t, p, n = tp[c.name] or 0, fp[c.name] or 0, fn[c.name] or 0
        assert(t > 0, c.name .. ": no example found")
        assert(t / (t + n) >= 0.9, c.name .. " recall " .. t / (t + n))
        assert(t / (t + p) >= 0.9, c.name .. " precision " .. t / (t + p))
    end
end

return T
