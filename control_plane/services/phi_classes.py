"""The personal and health data classes the gateway detects, with what each detector
does (GET /api/v1/phi-classes, docs/phi.md). The patterns themselves live in
lua/sluice/phi_classes.lua, in the same order; tests/unit/test_phi_classes.py checks
that both name the same classes.

`approximate`: a pattern can only approximate the class (it depends on a context
keyword, a capitalised word, or a shape that other things share); `how` says how."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ACTIONS = ("mask", "block", "log")
DEFAULT = "*"   # a policy's key for every class it does not name


@dataclass(frozen=True)
class PhiClass:
    name: str
    placeholder: str       # the tag of [TAG_n]
    hipaa: str | None      # the Safe Harbor identifier it covers (None: a Chinese form)
    detector: str
    approximate: bool
    how: str = ""


_C = PhiClass
CLASSES: tuple[PhiClass, ...] = (
    _C("email", "EMAIL", "electronic mail addresses",
       "local part @ domain with at least one dot", False),
    _C("url", "URL", "web universal resource locators",
       "http:// or https:// or www. up to a space or quote (trailing punctuation left out)",
       False),
    _C("face_image", "IMAGE", "full-face photographs and comparable images",
       "an inline image (data:image/...;base64,...) in a string value", True,
       "no face detection: every inline image is taken as a possible face; images sent "
       "as URLs are the url class"),
    _C("ip", "IP", "IP addresses",
       "IPv4 with octets 0-255; IPv6 full or with one :: compression", False),
    _C("mrn", "MRN", "medical record numbers",
       "keyword (MRN, medical record number, chart number, 病历号, 病案号, 住院号) then an "
       "identifier of 4-25 letters, digits and dashes holding a digit", True,
       "context only: a record number written without its keyword is not found"),
    _C("health_plan", "HEALTH_PLAN", "health plan beneficiary numbers",
       "keyword (member ID, beneficiary ID, insurance/Medicare/Medicaid number, policy "
       "number, 医保卡号, 社保卡号, 保险单号) then an identifier holding a digit", True,
       "context only, as mrn"),
    _C("account", "ACCOUNT", "account numbers",
       "keyword (account number, acct #, IBAN, 账号, 账户) then digits, spaces and dashes",
       True, "context only; card numbers without a keyword are the bank_card class"),
    _C("license", "LICENSE", "certificate/license numbers",
       "keyword (license/certificate number, driver's license, DEA, NPI, passport number, "
       "驾驶证号, 执业证书编号, 护照号) then an identifier holding a digit", True,
       "context only"),
    _C("device", "DEVICE", "device identifiers and serial numbers",
       "keyword (serial number, S/N, device ID, UDI, IMEI, MAC address, 序列号, 设备号) "
       "then an identifier; or a MAC address (six hex pairs with colons)", True,
       "context only, but for MAC addresses"),
    _C("biometric", "BIOMETRIC", "biometric identifiers, including finger and voice prints",
       "keyword (fingerprint, retina, iris, voiceprint, faceprint, palm print, biometric, "
       "指纹, 虹膜, 声纹, 掌纹) then an identifier of 6-64 characters holding a digit", True,
       "finds references to enrolled biometrics (template ids, hashes), not biometric "
       "data itself (a fingerprint image or a voice recording)"),
    _C("vehicle", "VEHICLE", "vehicle identifiers and serial numbers, including license plates",
       "a 17-character VIN whose 9th character is its check digit; a plate after a keyword "
       "(license plate, plate number, 车牌号); a Chinese plate (province character, letter, "
       "5-6 letters or digits)", True,
       "VINs without the North American check digit (some European ones) and plates of "
       "other countries written without a keyword are missed"),
    _C("other_id", "ID", "any other unique identifying number, characteristic, or code",
       "keyword (patient/case/subject/employee/student/claim/visit ID or number, ID:, "
       "就诊号, 工号, 学号, 编号) then an identifier holding a digit", True,
       "context only: an identifier is anything after such a keyword"),
    _C("cn_resident_id", "CN_ID", None,
       "18 characters: region, a valid birth date (1800-2099), sequence, and the GB 11643 "
       "ISO 7064 MOD 11-2 check character (digit or X)", False),
    _C("cn_mobile", "MOBILE", None,
       "11 digits 1[3-9]xxxxxxxxx, optionally +86 and grouped 3-4-4", False),
    _C("bank_card", "CARD", None,
       "13-19 digits, optionally grouped by spaces or dashes, passing the Luhn check", True,
       "Luhn passes one number in ten: a long number that is no card can still be taken"),
    _C("ssn", "SSN", "social security numbers",
       "NNN-NN-NNNN with a valid area (not 000, 666, 9xx), group and serial; undashed "
       "only after SSN or social security", False),
    _C("fax", "FAX", "fax numbers",
       "keyword (fax, fax number, 传真) then a phone-shaped number", True,
       "a fax number written without its keyword is found as a phone"),
    _C("phone", "PHONE", "telephone numbers",
       "NANP numbers ((NNN) NNN-NNNN, NNN-NNN-NNNN, +1 ...), international +CC numbers, "
       "Chinese landlines 0NN-NNNNNNNN", True,
       "a shape shared with other numbers: ten digits in a row are taken as a phone"),
    _C("date", "DATE", "all elements of dates (except year) directly related to an individual",
       "full dates: 2024-03-05, 3/5/2024, March 5, 2024, 5 March 2024, 2024年3月5日", True,
       "every full date is taken, tied to a person or not; a year alone, or a month and "
       "day without year, is not"),
    _C("geo", "ADDRESS", "geographic subdivisions smaller than a state",
       "a street address (number, capitalised words, Street/Ave/Road/...); a ZIP code after "
       "a state abbreviation or 'ZIP'; a Chinese address (市/区/县 ... 路/街/巷/道 N号)", True,
       "cities, counties and addresses in other shapes are missed"),
    _C("name", "NAME", "names",
       "after a title (Mr, Mrs, Ms, Dr, Prof) or a keyword (patient, name, client): one to "
       "three capitalised words; Chinese: after 姓名/患者姓名, or a common surname with "
       "先生/女士/医生/护士", True,
       "no dictionary of names: a name is found only in these contexts, and a capitalised "
       "word after 'patient' is taken for one"),
)

NAMES = tuple(c.name for c in CLASSES)


def listing() -> list[dict[str, Any]]:
    """GET /api/v1/phi-classes: every class, in scan order."""
    return [asdict(c) for c in CLASSES]


def check_policy(value: Any) -> dict[str, str]:
    """A phi_policy: {"<class>": "mask" | "block" | "log", "*": the rest}. Raises
    ValueError naming the first bad key or action."""
    if not isinstance(value, dict) or not value:
        raise ValueError('must be null or an object {"<class>": "mask" | "block" | "log", '
                         '"*": <the rest>} naming at least one class or "*"')
    for key, action in value.items():
        if key != DEFAULT and key not in NAMES:
            raise ValueError(f"unknown class {key!r}: must be one of " + ", ".join(NAMES)
                             + ' or "*"')
        if action not in ACTIONS:
            raise ValueError(f"{key}: unknown action {action!r}: must be mask, block or log")
    return dict(value)
