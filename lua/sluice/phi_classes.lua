-- The personal and health data classes Sluice detects (docs/phi.md): the 18 HIPAA
-- Safe Harbor identifiers and the Chinese forms (resident ID, mobile, bank card).
-- Each class: its name (as `phi_policy` names it), the tag of its placeholder
-- ([TAG_n]), a PCRE pattern (compiled once per worker by ngx.re's "jo"), which
-- capture is the value (`group`: 0 the whole match, 1 the value after a context
-- keyword; `(?|…)` keeps alternatives on group 1) and an optional check on the bytes
-- of the value (checksums; no string is made for it).
--
-- Pure data and byte arithmetic: no ngx.*, so it loads under plain luajit too
-- (tests/unit/test_phi_classes.py compares the names with the control plane's list).
-- ORDER MATTERS: sluice.phi scans the classes in this order and a later class never
-- claims bytes an earlier one took, so the specific shapes (context keywords,
-- checksums) come before the general ones (any phone-like number, any date).
local str_byte = string.byte

local _M = {}

-- a CJK ideograph (U+4E00..U+9FFF) as UTF-8 bytes: no "u" option, no UTF-8 check
local CJK = [[(?:[\xe4-\xe9][\x80-\xbf]{2})]]
-- what may stand between a context keyword and its value
local SEP = [[\s*(?:#|:|：|是|为)?\s*]]
-- the value after a context keyword: letters, digits and dashes (a digit checked)
local VALUE = [[([A-Za-z0-9][A-Za-z0-9-]{3,24})]]

local function digit(b)
    return b and b >= 48 and b <= 57
end

-- the value holds a digit (a context keyword followed by a plain word is no identifier)
local function has_digit(s, from, to)
    for i = from, to do
        if digit(str_byte(s, i)) then
            return true
        end
    end
    return false
end

-- Luhn over the digits of s[from..to] (spaces and dashes skipped)
local function luhn(s, from, to)
    local sum, odd = 0, false
    for i = to, from, -1 do
        local b = str_byte(s, i)
        if digit(b) then
            local d = b - 48
            if odd then
                d = d * 2
                if d > 9 then d = d - 9 end
            end
            sum = sum + d
            odd = not odd
        end
    end
    return sum % 10 == 0
end

-- GB 11643: the 18th character of a resident ID is its ISO 7064 MOD 11-2 check
local CN_WEIGHTS = { 7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2 }
local CN_CHECK = { [0] = 49, 48, 88, 57, 56, 55, 54, 53, 52, 51, 50 }   -- "10X98765432"
local function cn_id(s, from)
    local sum = 0
    for i = 1, 17 do
        sum = sum + (str_byte(s, from + i - 1) - 48) * CN_WEIGHTS[i]
    end
    local last = str_byte(s, from + 17)
    if last == 120 then last = 88 end   -- x
    return CN_CHECK[sum % 11] == last
end

-- North American VIN: position 9 is a check digit over the transliterated letters
local VIN_VALUE = { A = 1, B = 2, C = 3, D = 4, E = 5, F = 6, G = 7, H = 8, J = 1, K = 2,
                    L = 3, M = 4, N = 5, P = 7, R = 9, S = 2, T = 3, U = 4, V = 5, W = 6,
                    X = 7, Y = 8, Z = 9 }
local VIN_WEIGHTS = { 8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2 }
local function vin_or_plate(s, from, to)
    if to - from ~= 16 or not has_digit(s, from, to) then
        return to - from < 16   -- a plate after its keyword, or a Chinese plate
    end
    local sum = 0
    for i = 1, 17 do
        local b = str_byte(s, from + i - 1)
        local v = digit(b) and b - 48 or VIN_VALUE[string.char(b)]
        if not v then
            return false
        end
        sum = sum + v * VIN_WEIGHTS[i]
    end
    local check = sum % 11
    local b9 = str_byte(s, from + 8)
    return (check == 10 and b9 == 88) or b9 == 48 + check
end

local OCTET = [[(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])]]
local MONTH = [[(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|]]
    .. [[aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)]]
local SURNAMES = "王|李|张|刘|陈|杨|黄|赵|吴|周|徐|孙|马|朱|胡|郭|何|高|林|罗|郑|梁|谢|宋|唐|"
    .. "许|韩|冯|邓|曹|彭|曾|肖|田|董|袁|潘|蒋|蔡|余|杜|叶|程|苏|魏|吕|丁|任|沈|姚|卢|姜|崔|"
    .. "钟|谭|陆|汪|范|金|石|廖|贾|夏|韦|方|白|邹|孟|熊|秦|邱|江|尹|薛|段|雷|侯|龙|史|陶|"
    .. "黎|贺|顾|毛|郝|龚|邵|万|钱|严|覃|武|戴|莫|孔|向|汤"
local PROVINCES = "京|津|沪|渝|冀|豫|云|辽|黑|湘|皖|鲁|新|苏|浙|赣|鄂|桂|甘|晋|蒙|陕|吉|闽|"
    .. "贵|粤|青|藏|川|宁|琼"

_M.CLASSES = {
    { name = "email", tag = "EMAIL", group = 0,
      pattern = [[[A-Za-z0-9._%+-]++@[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++]] },
    { name = "url", tag = "URL", group = 0,
      pattern = [=[(?i)\b(?:https?://|www\.)[^\s"'<>\\]*[^\s"'<>\\.,;:)!?]]=] },
    { name = "face_image", tag = "IMAGE", group = 0,
      pattern = [[data:image/[A-Za-z0-9.+-]++;base64,[A-Za-z0-9+/=]++]] },
    { name = "ip", tag = "IP", group = 0,
      pattern = [[(?i)(?<![0-9.])(?:]] .. OCTET .. [[\.){3}]] .. OCTET .. [[(?![0-9]|\.[0-9])]]
          .. [[|(?<![0-9a-f:])(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}(?![0-9a-f:])]]
          .. [[|(?<![0-9a-f:])(?:[0-9a-f]{1,4}:){1,6}:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*(?![0-9a-f:])]] },
    { name = "mrn", tag = "MRN", group = 1, check = has_digit,
      pattern = [[(?i)(?:\bMRN|\bmedical record(?: number| no\.?| #)?|\bchart (?:number|no\.?)]]
          .. [[|病历号|病案号|住院号)]] .. SEP .. VALUE },
    { name = "health_plan", tag = "HEALTH_PLAN", group = 1, check = has_digit,
      pattern = [[(?i)(?:\bmember (?:ID|number|no\.?)|\bbeneficiary (?:ID|number|no\.?)]]
          .. [[|\b(?:health plan|insurance|medicare|medicaid) (?:ID|number|no\.?)]]
          .. [[|\bpolicy (?:number|no\.?)|医保卡号|医保号|社保卡号|保险单号)]] .. SEP .. VALUE },
    { name = "account", tag = "ACCOUNT", group = 1, check = has_digit,
      pattern = [[(?i)(?:\baccount (?:number|no\.?|#)|\bacct\.?(?: no\.?| #)?|\bIBAN]]
          .. [[|账号|帐号|账户)]] .. SEP .. [[([A-Za-z]{0,4}[0-9][0-9 -]{3,30}[0-9])]] },
    { name = "license", tag = "LICENSE", group = 1, check = has_digit,
      pattern = [[(?i)(?:\b(?:driver'?s )?licen[cs]e (?:number|no\.?|#)|\bcertificate ]]
          .. [[(?:number|no\.?|#)|\bDEA(?: number| no\.?)?|\bNPI|\bpassport (?:number|no\.?)]]
          .. [[|驾驶证号|驾照号|执业证书编号|证书编号|护照号)]] .. SEP .. VALUE },
    { name = "device", tag = "DEVICE", group = 1, check = has_digit,
      pattern = [[(?i)(?|(?:\bserial (?:number|no\.?|#)|\bS/N|\bdevice (?:ID|identifier)|\bUDI]]
          .. [[|\bIMEI|\bMAC address|序列号|设备号)]] .. SEP .. [[([A-Za-z0-9][A-Za-z0-9:-]{3,40})]]
          .. [[|\b([0-9a-f]{2}(?::[0-9a-f]{2}){5})\b)]] },
    { name = "biometric", tag = "BIOMETRIC", group = 1, check = has_digit,
      pattern = [[(?i)(?:\b(?:fingerprint|retina|iris|voice ?print|face ?print|palm ?print]]
          .. [[|biometric)(?: scan| template| record)?(?: ID| hash| no\.?| number)?]]
          .. [[|指纹|虹膜|声纹|掌纹|人脸特征)(?:编号|模板|ID)?]] .. SEP
          .. [[([A-Za-z0-9][A-Za-z0-9-]{5,63})]] },
    { name = "vehicle", tag = "VEHICLE", group = 1, check = vin_or_plate,
      pattern = [[(?|(?i:\blicen[cs]e plate|\bplate (?:number|no\.?)|车牌(?:号)?)]] .. SEP
          .. [[([A-Za-z0-9][A-Za-z0-9 -]{3,8}[A-Za-z0-9])|((?:]] .. PROVINCES
          .. [[)[A-Z](?:·)?[A-Z0-9]{5,6})|\b([A-HJ-NPR-Z0-9]{17})\b)]] },
    { name = "other_id", tag = "ID", group = 1, check = has_digit,
      pattern = [[(?i)(?:\b(?:patient|case|subject|employee|student|claim|visit|encounter) ]]
          .. [[(?:ID|number|no\.?|#)|\bID(?=\s*[#:])|就诊号|病人号|工号|学号|编号)]] .. SEP .. VALUE },
    { name = "cn_resident_id", tag = "CN_ID", group = 0, check = cn_id,
      pattern = [[(?<![0-9])[1-9][0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])]]
          .. [[(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}[0-9Xx](?![0-9])]] },
    { name = "cn_mobile", tag = "MOBILE", group = 0,
      pattern = [[(?<![0-9])(?:\+?86[ -]?)?1[3-9][0-9](?:[ -]?[0-9]{4}){2}(?![0-9])]] },
    { name = "bank_card", tag = "CARD", group = 0, check = luhn,
      pattern = [[(?<![0-9A-Za-z])[0-9](?:[ -]?[0-9]){12,18}(?![0-9A-Za-z])]] },
    { name = "ssn", tag = "SSN", group = 1,
      pattern = [[(?i)(?|\b(?:SSN|social security(?: number| no\.?)?)\s*[#:]?\s*]]
          .. [[((?!000|666|9)[0-9]{3}[- ]?(?!00)[0-9]{2}[- ]?(?!0000)[0-9]{4})]]
          .. [[|(?<![0-9])((?!000|666|9)[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}))(?![0-9])]] },
    { name = "fax", tag = "FAX", group = 1,
      pattern = [[(?i)(?:\bfax(?: number| no\.?| #)?|传真(?:号(?:码)?)?)\s*(?::|：)?\s*]]
          .. [[(\+?[0-9][0-9 ().-]{6,18}[0-9])]] },
    { name = "phone", tag = "PHONE", group = 0,
      pattern = [[(?<![0-9])(?:\+?1[ .-]?)?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-]?)]]
          .. [[[2-9][0-9]{2}[ .-]?[0-9]{4}(?![0-9])]]
          .. [[|\+[1-9][0-9]{0,2}[ .-]?(?:\(?[0-9]{1,4}\)?[ .-]?){2,5}[0-9]{2,4}(?![0-9])]]
          .. [[|(?<![0-9])0[1-9][0-9]{1,2}-[0-9]{7,8}(?![0-9])]] },
    { name = "date", tag = "DATE", group = 1,
      pattern = [[(?i)(?|\b((?:19|20)[0-9]{2}[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12][0-9]|3[01]))\b]]
          .. [[|\b((?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12][0-9]|3[01])/(?:19|20)?[0-9]{2})\b]]
          .. [[|\b(]] .. MONTH .. [[\.? [0-9]{1,2}(?:st|nd|rd|th)?,? (?:19|20)[0-9]{2})\b]]
          .. [[|\b([0-9]{1,2} ]] .. MONTH .. [[\.?,? (?:19|20)[0-9]{2})\b]]
          .. [[|((?:19|20)[0-9]{2}年[0-9]{1,2}月[0-9]{1,2}(?:日|号)))]] },
    { name = "geo", tag = "ADDRESS", group = 1,
      pattern = [[(?|\b([0-9]{1,6} (?:[A-Z][a-z]+ ){1,3}(?:Street|St|Avenue|Ave|Road|Rd|Boulevard]]
          .. [[|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl|Terrace|Parkway)\b\.?)]]
          .. [[|(?i:\bzip(?: code)?)\s*:?\s*([0-9]{5}(?:-[0-9]{4})?)\b]]
          .. [[|\b[A-Z]{2},? ([0-9]{5}(?:-[0-9]{4})?)\b]]
          .. [[|(]] .. CJK .. [[{1,8}(?:市|区|县)]] .. CJK .. [[{1,12}(?:路|街|巷|道)[0-9]{1,5}号))]] },
    { name = "name", tag = "NAME", group = 1,
      pattern = [[(?|\b(?:Mr|Mrs|Ms|Miss|Dr|Prof)\.? ([A-Z][a-z]+(?: [A-Z][a-z]+){0,2})]]
          .. [[|(?i:\b(?:patient|name|client|resident))\s*(?::|is)?\s*]]
          .. [[([A-Z][a-z]+(?: [A-Z]\.)?(?: [A-Z][a-z]+){1,2})]]
          .. [[|(?:姓名|患者姓名|病人姓名)\s*(?::|：|是|为)?\s*(]] .. CJK .. [[{2,3})]]
          .. [[|((?:]] .. SURNAMES .. [[)]] .. CJK .. [[{0,2})(?:先生|女士|医生|护士))]] },
}

-- name -> class, and each class's position in the scan order
_M.BY_NAME = {}
for i, c in ipairs(_M.CLASSES) do
    c.index = i
    _M.BY_NAME[c.name] = c
end

_M.luhn, _M.cn_id, _M.vin_or_plate = luhn, cn_id, vin_or_plate

return _M
