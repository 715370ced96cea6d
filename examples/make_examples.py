#!/usr/bin/env python3
"""Regenerate examples/annual_report.pdf, a fictional company annual report.

Standard library only: the PDF is written by hand (objects, cross-reference table,
the built-in Helvetica fonts, one text block per page), so the output is small and
byte-for-byte reproducible. Run it from anywhere:

    python examples/make_examples.py

:func:`pdf_bytes` is also used by the tests to make small PDFs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

PAGE_WIDTH, PAGE_HEIGHT = 612, 792  # US Letter, in points
MARGIN = 72
BODY_SIZE, BODY_LEADING, BODY_WRAP = 10.5, 14, 86
STYLES = {  # paragraph prefix -> (font resource, size, leading, wrap width in characters)
    "# ": ("F2", 18, 24, 50),
    "## ": ("F2", 12.5, 18, 70),
    "": ("F1", BODY_SIZE, BODY_LEADING, BODY_WRAP),
}
PARAGRAPH_GAP = 7


def pdf_string(text: str) -> str:
    """Encode ``text`` as a PDF literal string in WinAnsi encoding, escaping as needed."""
    out = []
    for byte in text.encode("cp1252", errors="replace"):
        char = chr(byte)
        if char in "\\()":
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return "(" + "".join(out) + ")"


def layout(text: str) -> list[tuple[str, float, float, str]]:
    """Split a page's text into ``(font, size, leading, line)`` tuples.

    Paragraphs are separated by blank lines; a paragraph starting with "# " or "## "
    is a heading. An entry with an empty font marks the gap between paragraphs.
    """
    lines: list[tuple[str, float, float, str]] = []
    for paragraph in text.strip().split("\n\n"):
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        prefix = next(p for p in STYLES if paragraph.startswith(p))
        font, size, leading, width = STYLES[prefix]
        if lines:
            lines.append(("", 0, PARAGRAPH_GAP, ""))
        for line in textwrap.wrap(paragraph[len(prefix):], width):
            lines.append((font, size, leading, line))
    return lines


def content_stream(lines: Sequence[tuple[str, float, float, str]], footer: str | None) -> bytes:
    """The drawing operators for one page: text lines from the top margin down, and a footer."""
    ops = []
    if lines:
        ops.append(f"BT {MARGIN} {PAGE_HEIGHT - MARGIN} Td")
        current = None
        first = True
        for font, size, leading, line in lines:
            if not first:
                ops.append(f"0 {-leading} Td")
            first = False
            if not font:
                continue
            if (font, size) != current:
                ops.append(f"/{font} {size:g} Tf")
                current = (font, size)
            ops.append(f"{pdf_string(line)} Tj")
        ops.append("ET")
    if footer:
        ops.append(f"BT /F1 8 Tf {MARGIN} {MARGIN / 2:g} Td {pdf_string(footer)} Tj ET")
    return "\n".join(ops).encode("latin-1")


def paginate(text: str) -> list[list[tuple[str, float, float, str]]]:
    """Lay out one logical page, spilling onto further physical pages if it is too long."""
    room = PAGE_HEIGHT - 2 * MARGIN
    pages: list[list[tuple[str, float, float, str]]] = [[]]
    used = 0.0
    for entry in layout(text):
        if pages[-1] and used + entry[2] > room:
            pages.append([])
            used = 0.0
        if not pages[-1] and not entry[0]:
            continue  # no paragraph gap at the top of a page
        pages[-1].append(entry)
        used += entry[2]
    return pages


def pdf_bytes(pages: Sequence[str], *, title: str = "", footer: str | None = None) -> bytes:
    """A PDF with one page per string in ``pages`` (more if a page overflows).

    Page text is plain prose: paragraphs separated by blank lines, headings marked
    with "# " or "## ". An empty string gives a page with no text at all. ``footer``,
    if given, is printed on every page, with ``{page}`` replaced by the page number.
    """
    physical = [lines for text in pages for lines in paginate(text)]
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, filled in below once the page objects are numbered
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
        f"<< /Title {pdf_string(title)} /Producer (make_examples.py) >>".encode("latin-1"),
    ]
    kids = []
    for number, lines in enumerate(physical, start=1):
        page_footer = footer.replace("{page}", str(number)) if footer else None
        stream = content_stream(lines, page_footer)
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        contents_id = len(objects)
        objects.append(
            (
                f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_WIDTH} {PAGE_HEIGHT}] "
                f"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents {contents_id} 0 R >>"
            ).encode("latin-1")
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>".encode("latin-1")

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_offset = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 5 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_offset
    return bytes(out)


COMPANY = "Northwind Harbor Logistics"

REPORT_PAGES = [
    # Page 1: cover and letter from the chief executive.
    """
# Northwind Harbor Logistics: Annual Report 2023

## About the company

Northwind Harbor Logistics AS is a freight forwarding, warehousing and short-sea shipping
group that moves goods between the ports of the Baltic Sea and the North Sea. The company's
headquarters are in Tallinn. The group was founded in 1994 by three former harbour pilots
with a single leased warehouse and two second-hand coasters, and it is today one of the
larger independent logistics operators in the region.

Our customers are manufacturers, retailers and food producers who need their cargo to
arrive on a predictable schedule. We combine our own vessels, trucks and warehouses with a
network of trusted partners, and we sell the result as a single door-to-door service.

## Letter from the chief executive

Dear shareholders, customers and colleagues,

2023 was a year in which the patience of the previous three years began to pay off. Demand
for short-sea shipping held up better than many forecasts suggested, our warehouse business
grew faster than the market, and we completed the largest construction project in the
history of the company. At the same time, interest rates, fuel prices and a tight labour
market reminded us every week that good results are never guaranteed.

I want to thank our employees first. They kept cargo moving through two severe winter
storms, a strike at a partner terminal and the busiest peak season we have ever handled.
I also want to thank our customers, several of whom extended their contracts with us for
five years or more, which gives us the confidence to keep investing.

The chief executive of Northwind Harbor Logistics is Marta Lindqvist, who has led the
company since March 2019. In the coming year we will concentrate on three things: filling
our new warehouse capacity, cutting emissions from our fleet, and making our booking and
tracking tools as simple to use as a consumer parcel service.

Marta Lindqvist, Chief Executive Officer
""",
    # Page 2: financial review.
    """
# Financial review

## Revenue and results

Revenue for 2023 was EUR 412.6 million, an increase of 8.4 percent compared with EUR 380.6
million in 2022. Growth came from all three business areas, but most strongly from contract
warehousing, where new customers in consumer electronics and frozen food filled space faster
than we had planned.

Operating profit (EBIT) rose to EUR 31.2 million from EUR 27.5 million, and the operating
margin improved from 7.2 percent to 7.6 percent. Higher fuel costs in the first half of the
year were largely passed on to customers through bunker adjustment clauses. Staff costs
increased by 6.1 percent, mainly because of collective wage agreements in Estonia and
Finland. Net profit for the year was EUR 22.9 million, and earnings per share were EUR 1.14.

## Revenue by business area

Freight forwarding contributed 51 percent of revenue, contract warehousing 29 percent and
short-sea shipping 20 percent. Freight forwarding volumes measured in shipments grew by 3
percent, while average revenue per shipment rose slightly because of longer routes to
Central Europe. Warehousing revenue grew by 17 percent. Shipping revenue was flat, as
higher freight rates on the Tallinn to Rotterdam route offset one vessel being out of
service for a month of scheduled dry-docking.

## Cash flow and financing

Cash flow from operating activities was EUR 48.7 million. Capital expenditure amounted to
EUR 46.3 million, of which about two thirds went to the new distribution centre in Poland
and the rest to trucks, handling equipment and software. Net debt at the end of the year was
EUR 88.0 million, equal to 1.6 times EBITDA, which is within the limit of 2.5 times set by
the board. "We financed a record year of investment without weakening the balance sheet,"
said chief financial officer Jonas Virtanen.
""",
    # Page 3: operations and network.
    """
# Operations and network

## A new distribution centre

In September 2023 the company opened a new warehouse named Saltmarsh Gate in Gdansk, Poland.
Saltmarsh Gate has 38,000 square metres of floor space, 41 loading docks and a rail siding
that connects it directly to the container terminal. About a quarter of the building is
temperature controlled, with separate chambers for chilled and frozen goods. The warehouse
employed 212 people by the end of the year, most of them recruited locally.

Building work started in the spring of 2022 and was finished two weeks ahead of schedule.
The first customer, a Scandinavian furniture retailer, moved its inventory for the Polish
and Czech markets into the building in October. By December the warehouse was 64 percent
occupied, and we expect it to be full by the end of 2024.

## Ports, vessels and trucks

We run our own terminals or dedicated berths in Tallinn, Helsinki, Riga, Gdansk and
Rotterdam. Our shipping business operates nine roll-on roll-off and general cargo vessels
with an average age of fourteen years. The road fleet grew to 214 trucks and 390 trailers,
supplemented by around 600 subcontracted vehicles at peak times.

The share of shipments delivered on time reached 96.1 percent, our best result so far. The
main reasons were better planning of trailer repositioning and a new control tower in Riga
that monitors every shipment around the clock and warns customers about delays before they
happen. Damage claims fell to 0.08 percent of shipments.

## Digital services

The customer portal, launched in 2021, now handles 71 percent of all bookings. During the
year we added live container tracking, electronic proof of delivery and an interface that
lets larger customers connect their own ordering systems to ours.
""",
    # Page 4: strategy and sustainability.
    """
# Strategy and sustainability

## Cleaner transport

Transport produces most of our greenhouse gas emissions, so that is where our climate plan
starts. In 2023 emissions per tonne-kilometre fell by 11 percent compared with 2021, the
base year of our targets. Our goal is a reduction of 40 percent by 2030.

The fleet electrification programme is tracked under internal project code 48213. The
programme replaces diesel trucks on short urban and port routes with battery electric
models, installs fast chargers at our terminals, and tests shore power for vessels at berth.
Eighteen electric trucks were in service at the end of the year, operating mainly around
Tallinn and Helsinki harbours, and a further thirty are on order for delivery in 2024.

Two of our vessels were fitted with air lubrication systems that release a carpet of small
bubbles under the hull, which reduces friction and cuts fuel use by an estimated five
percent. We are also testing biofuel blends on the Helsinki crossing in cooperation with a
Finnish fuel supplier.

## Buildings and energy

Saltmarsh Gate was designed to a high environmental standard, with a rooftop solar
installation of 2.4 megawatts, LED lighting with motion sensors and heat pumps for the
office areas. Across all our warehouses, 58 percent of the electricity we used came from
renewable sources, up from 41 percent the year before.

## Our priorities for 2024 to 2026

Our strategy for the next three years has four parts: grow contract warehousing in Poland
and the Baltic states; build longer partnerships with fewer, larger customers; continue the
shift to low-emission transport; and simplify our internal systems so that a shipment is
recorded only once, from booking to invoice. We expect revenue growth of 5 to 7 percent a
year and an operating margin of at least 8 percent by 2026.
""",
    # Page 5: people and safety.
    """
# People and safety

## Our workforce

At the end of 2023 Northwind Harbor Logistics had 2,847 employees, compared with 2,590 a
year earlier. The increase came mainly from the opening of Saltmarsh Gate and from new
drivers hired in Latvia. Our people work in seven countries and come from more than thirty
nations. Women make up 31 percent of all employees and 38 percent of managers.

Voluntary staff turnover fell to 9.8 percent from 12.3 percent. In our annual engagement
survey, answered by 84 percent of employees, 77 percent said they would recommend the
company as a place to work. The lowest scores concerned workload during the peak season,
and we have responded by hiring seasonal staff earlier and by improving shift planning.

## Skills and training

Every employee received on average 21 hours of training during the year. The apprenticeship
programme for warehouse operators and truck drivers, run together with vocational schools in
Estonia and Poland, had 63 apprentices, and 45 of those who finished the programme were
offered permanent jobs. Forty managers completed our leadership course, which this year
focused on coaching and on leading teams that work across several countries.

## Health and safety

Safety is the first item on the agenda of every management meeting. The lost time injury
frequency rate fell to 1.9 injuries per million hours worked, from 2.6 the year before.
There were no fatal accidents. Most injuries happened during manual handling of loose
cargo, and we have therefore invested in vacuum lifting aids and additional training in
our largest warehouses.
""",
    # Page 6: governance and shareholder information.
    """
# Governance and shareholder information

## Board of directors

The board of directors has six members, four of whom are independent of the company and its
major shareholders. Ingrid Saar has chaired the board since 2020. The board met eleven times
during the year. Its audit committee reviewed the financial statements, internal controls and
the risk register, and its remuneration committee proposed the pay of the executive team.
The company's auditor is Kask and Partners, which has audited the group since 2018.

## Dividend

The board proposes a dividend of EUR 0.42 per share for 2023, compared with EUR 0.36 for
2022. This corresponds to about 37 percent of net profit and is in line with our policy of
paying out between 30 and 50 percent of net profit while keeping enough cash to finance
growth.

## Annual general meeting

The annual general meeting will be held on 14 May 2024 at 10:00 in the Port Hall conference
centre in Tallinn. Shareholders who wish to attend must register by 7 May 2024. The notice
of the meeting, the proposed agenda and the voting forms will be published on the company's
website at least three weeks before the meeting.

## Financial calendar

Interim report for the first quarter: 25 April 2024. Interim report for the second quarter:
23 July 2024. Interim report for the third quarter: 29 October 2024.

## Contact

Investor relations, Northwind Harbor Logistics AS, Sadama 19, Tallinn, Estonia.
Questions from shareholders and analysts can be sent to investor.relations@northwind-harbor.example.
""",
]


def build_report() -> bytes:
    """The bytes of annual_report.pdf."""
    return pdf_bytes(
        REPORT_PAGES,
        title=f"{COMPANY} Annual Report 2023",
        footer=f"{COMPANY} - Annual Report 2023 - Page {{page}}",
    )


def main() -> None:
    """Write annual_report.pdf next to this script."""
    target = Path(__file__).resolve().parent / "annual_report.pdf"
    data = build_report()
    target.write_bytes(data)
    print(f"wrote {target} ({len(data):,} bytes)")


if __name__ == "__main__":
    main()
