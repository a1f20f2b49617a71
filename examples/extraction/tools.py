"""Synthetic tools for the extraction workflow of the pointer paper ("Solving Context Window Overflow
in AI Agents", 2025), re-created offline: one tool returns a long safety data sheet (16 sections,
~25,000 tokens, the composition table in section 3 among look-alike mentions elsewhere), another
takes the document *by handle* and returns its ingredient list.

Plain functions: ctxagent makes their schemas from the type hints and docstrings
(``--tools examples/extraction/tools.py:make_sds``). Everything is generated from a seed, so
:func:`ingredients` gives the exact answer to check against.
"""

from __future__ import annotations

import random
import re

# (name, CAS number, EC number, CLP classification): real identifiers of common solvents and additives
POOL = [
    ("Ethanol", "64-17-5", "200-578-6", "Flam. Liq. 2, H225; Eye Irrit. 2, H319"),
    ("Propan-2-ol", "67-63-0", "200-661-7", "Flam. Liq. 2, H225; Eye Irrit. 2, H319; STOT SE 3, H336"),
    ("Acetone", "67-64-1", "200-662-2", "Flam. Liq. 2, H225; Eye Irrit. 2, H319; STOT SE 3, H336"),
    ("Toluene", "108-88-3", "203-625-9", "Flam. Liq. 2, H225; Asp. Tox. 1, H304; Repr. 2, H361d"),
    ("Xylene", "1330-20-7", "215-535-7", "Flam. Liq. 3, H226; Acute Tox. 4, H312; Skin Irrit. 2, H315"),
    ("Ethyl acetate", "141-78-6", "205-500-4", "Flam. Liq. 2, H225; Eye Irrit. 2, H319; STOT SE 3, H336"),
    ("n-Butyl acetate", "123-86-4", "204-658-1", "Flam. Liq. 3, H226; STOT SE 3, H336"),
    ("Methanol", "67-56-1", "200-659-6", "Flam. Liq. 2, H225; Acute Tox. 3, H301; STOT SE 1, H370"),
    ("2-Butoxyethanol", "111-76-2", "203-905-0", "Acute Tox. 4, H302; Skin Irrit. 2, H315"),
    ("Propylene glycol", "57-55-6", "200-338-0", "Not classified"),
    ("Glycerol", "56-81-5", "200-289-5", "Not classified"),
    ("Sodium hydroxide", "1310-73-2", "215-185-5", "Met. Corr. 1, H290; Skin Corr. 1A, H314"),
    ("Citric acid", "77-92-9", "201-069-1", "Eye Irrit. 2, H319"),
    ("Hydrogen peroxide", "7722-84-1", "231-765-0", "Ox. Liq. 1, H271; Acute Tox. 4, H302; Skin Corr. 1A, H314"),
    ("Ethylene glycol", "107-21-1", "203-473-3", "Acute Tox. 4, H302; STOT RE 2, H373"),
    ("Cyclohexanone", "108-94-1", "203-631-1", "Flam. Liq. 3, H226; Acute Tox. 4, H332"),
    ("Butanone", "78-93-3", "201-159-0", "Flam. Liq. 2, H225; Eye Irrit. 2, H319; STOT SE 3, H336"),
    ("d-Limonene", "5989-27-5", "227-813-5", "Flam. Liq. 3, H226; Skin Sens. 1, H317; Aquatic Chronic 1, H410"),
    ("Benzyl alcohol", "100-51-6", "202-859-9", "Acute Tox. 4, H302; Acute Tox. 4, H332"),
    ("Sodium lauryl sulfate", "151-21-3", "205-788-1", "Acute Tox. 4, H302; Eye Dam. 1, H318"),
]
SECTIONS = [
    "Identification of the substance/mixture and of the company/undertaking", "Hazards identification",
    "Composition/information on ingredients", "First-aid measures", "Firefighting measures",
    "Accidental release measures", "Handling and storage", "Exposure controls/personal protection",
    "Physical and chemical properties", "Stability and reactivity", "Toxicological information",
    "Ecological information", "Disposal considerations", "Transport information", "Regulatory information",
    "Other information",
]
SUBJECTS = ["the product", "the mixture", "vapours", "the liquid", "spilled material", "contaminated clothing",
            "empty containers", "the substance", "mists and aerosols", "residues"]
VERBS = ["must be kept away from", "should not be released to", "can form explosive mixtures with",
         "may cause irritation on contact with", "must be stored separately from", "is to be handled only with",
         "should be collected with", "can react violently with", "must be ventilated away from",
         "should be rinsed off with"]
OBJECTS = ["sources of ignition", "drains and surface water", "air at ambient temperature", "skin and eyes",
           "strong oxidising agents", "suitable protective gloves (EN 374)", "inert absorbent material",
           "strong acids and bases", "enclosed spaces", "plenty of water for at least 15 minutes"]
QUALIFIERS = ["in accordance with local regulations", "under normal conditions of use",
              "as described in section 8", "unless otherwise stated", "at all times during handling",
              "following good industrial hygiene practice", "where exposure limits may be exceeded",
              "as a precautionary measure", "in line with the exposure scenario", "during maintenance work"]
PARAGRAPHS_PER_SECTION = 11
SENTENCES_PER_PARAGRAPH = 8


def ingredients(seed: int = 11) -> list[dict[str, str]]:
    """The ingredients of the sheet made with ``seed``, as the composition table lists them."""
    rng = random.Random(seed)
    chosen = rng.sample(POOL, 7)
    rows = []
    for name, cas, ec, _ in chosen:
        low = rng.choice([1, 2.5, 5, 10, 15, 20, 25])
        high = low + rng.choice([2.5, 5, 10])
        rows.append({"name": name, "cas": cas, "ec": ec, "concentration": f"{low:g} - {high:g}"})
    return rows


def make_sds(product: str = "Solvent blend SB-200", seed: int = 11) -> str:
    """Return the full safety data sheet of a product (16 sections, tens of thousands of tokens).

    Args:
        product: the trade name printed on the sheet
        seed: generates the same sheet every time for the same seed
    """
    rng = random.Random(seed * 7919)
    rows = ingredients(seed)
    classes = {name: clp for name, _, _, clp in POOL}
    lines = [f"SAFETY DATA SHEET: {product}", "according to Regulation (EC) No. 1907/2006 (REACH), Annex II",
             f"Version 4.{seed % 10} - revision date 2025-03-{seed % 28 + 1:02d}", ""]
    for number, title in enumerate(SECTIONS, start=1):
        lines += [f"SECTION {number}: {title}", ""]
        if number == 3:
            lines += _composition(rows, classes)
        for paragraph in range(PARAGRAPHS_PER_SECTION):
            lines += [f"{number}.{paragraph + 1} " + " ".join(_sentence(rng) for _ in range(SENTENCES_PER_PARAGRAPH)),
                      ""]
            if number in (8, 11) and paragraph == 2:  # look-alike mentions outside the table
                mentioned = rng.choice(rows)
                lines += [f"Note: {mentioned['name']} (CAS {mentioned['cas']}) has an occupational exposure limit "
                          f"of {rng.choice([20, 50, 100, 200])} ppm (8 h TWA); see the supplier's data.", ""]
    lines += ["End of safety data sheet."]
    return "\n".join(lines) + "\n"


def _composition(rows: list[dict[str, str]], classes: dict[str, str]) -> list[str]:
    table = ["3.2 Mixtures", "",
             "| Chemical name | CAS No. | EC No. | Concentration (% w/w) | Classification (EC) No 1272/2008 |",
             "|---|---|---|---|---|"]
    table += [f"| {r['name']} | {r['cas']} | {r['ec']} | {r['concentration']} | {classes[r['name']]} |" for r in rows]
    return [*table, "", "The full text of the H-statements is given in section 16.", ""]


def _sentence(rng: random.Random) -> str:
    return (f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
            f"{rng.choice(QUALIFIERS)}.")


_ROW = re.compile(r"^\|\s*(.+?)\s*\|\s*([0-9]{2,7}-[0-9]{2}-[0-9])\s*\|\s*([0-9]{3}-[0-9]{3}-[0-9])\s*\|\s*(.+?)\s*\|")


def extract_ingredients(document: str) -> list[dict[str, str]]:
    """Extract the ingredient list (name, CAS, EC, concentration) from a safety data sheet's section 3.

    Args:
        document: the safety data sheet text, given by its handle (e.g. @sds)
    """
    start = document.find("\nSECTION 3:")
    end = document.find("\nSECTION 4:", start)
    if start < 0 or end < 0:
        raise ValueError("no section 3 (composition) found in the document")
    found = [_ROW.match(line) for line in document[start:end].splitlines()]
    rows = [{"name": m[1], "cas": m[2], "ec": m[3], "concentration": m[4]} for m in found if m]
    if not rows:
        raise ValueError("section 3 has no composition table")
    return rows
