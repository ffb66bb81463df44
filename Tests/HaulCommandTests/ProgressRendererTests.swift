import Foundation
import Haul
import Testing

@testable import HaulCommand

@Suite("Rendering the live display")
struct ProgressRendererTests {
    static let mib: Int64 = 1_048_576

    func total(
        done: Int = 1,
        failed: Int = 0,
        of files: Int = 4,
        bytes: Int64 = 3 * mib,
        expected: Int64? = 8 * mib
    )
        -> BatchProgress
    {
        BatchProgress(
            totalFiles: files,
            completedFiles: done,
            failedFiles: failed,
            cancelledFiles: 0,
            skippedFiles: 0,
            transferredBytes: bytes,
            expectedBytes: expected,
            knownExpectedBytes: expected ?? 0,
            filesOfUnknownSize: expected == nil ? 1 : 0,
            fractionCompleted: 0.375,
            bytesPerSecond: Double(Self.mib),
            estimatedTimeRemaining: .seconds(5)
        )
    }

    func active(_ name: String, _ received: Int64, of expected: Int64?) -> ProgressRenderer.Active {
        .init(
            name: name,
            progress: TransferProgress(receivedBytes: received, expectedBytes: expected, bytesPerSecond: 524_288)
        )
    }

    @Test func drawsATransferLineAndATotalLineThatFitTheWidth() {
        let renderer = ProgressRenderer(width: 100)
        let lines = renderer.lines(
            for: .init(
                active: [self.active("photo.jpg", Self.mib, of: 2 * Self.mib)],
                total: self.total(),
                elapsed: .seconds(3)
            )
        )
        #expect(
            lines == [
                "photo.jpg                 [=====>     ]   50%  1.00 MiB/2.00 MiB  512 KiB/s  2.0s",
                "total                     [====>      ]   37%  1/4 files  3.00 MiB/8.00 MiB  1.00 MiB/s  5.0s",
            ]
        )
    }

    @Test(arguments: [20, 34, 50, 80, 120, 200])
    func neverWritesALineWiderThanTheWindow(width: Int) {
        let renderer = ProgressRenderer(width: width)
        let snapshot = ProgressRenderer.Snapshot(
            active: [
                self.active(String(repeating: "very-long-name-", count: 10) + ".tar.gz", 5, of: 10),
                self.active("写真アルバム二〇二四年夏休みの思い出.zip", 5, of: nil),
            ],
            total: self.total(failed: 2, expected: nil),
            elapsed: .seconds(1)
        )
        for line in renderer.lines(for: snapshot) {
            #expect(line.columns <= width, "\(line)")
        }
    }

    @Test func showsAFileOfUnknownSizeHonestly() {
        let line = ProgressRenderer(width: 100).transferLine(
            self.active("stream.bin", 3 * Self.mib, of: nil),
            width: 100
        )
        #expect(line.contains("   ?"))
        #expect(line.contains("[···········]"))
        #expect(line.contains("3.00 MiB  512 KiB/s"))
        let total = ProgressRenderer(width: 100).totalLine(self.total(expected: nil), width: 100)
        #expect(total.contains("3.00 MiB/?"))
    }

    @Test func shortensLongNamesInTheMiddleKeepingTheExtension() {
        #expect(ProgressRenderer.shorten("a-very-long-file-name.tar.gz", to: 12) == "a-ver…tar.gz")
        #expect(ProgressRenderer.shorten("short.txt", to: 12) == "short.txt")
        #expect(ProgressRenderer.shorten("写真写真写真写真.zip", to: 10).columns <= 10)
    }

    @Test func countsManyTransfersBeyondTheLineLimit() {
        let active = (0..<20).map { self.active("f\($0)", 1, of: 2) }
        let lines = ProgressRenderer(width: 80, maximumTransferLines: 5).lines(
            for: .init(active: active, total: self.total(), elapsed: .zero)
        )
        #expect(lines.count == 7)
        #expect(lines[5] == "  … and 15 more running")
        #expect(lines[6].hasPrefix("total"))
    }

    @Test func aShortTerminalShowsFewerTransferLinesSoThatTheDisplayFitsItsRows() {
        #expect(ProgressRenderer.transferLines(forRows: nil) == 8)
        #expect(ProgressRenderer.transferLines(forRows: 50) == 8)
        #expect(ProgressRenderer.transferLines(forRows: 8) == 5)
        #expect(ProgressRenderer.transferLines(forRows: 2) == 0)
        let active = (0..<16).map { self.active("f\($0)", 1, of: 2) }
        for rows in 2...12 {
            let renderer = ProgressRenderer(
                width: 80,
                maximumTransferLines: ProgressRenderer.transferLines(forRows: rows)
            )
            let lines = renderer.lines(for: .init(active: active, total: self.total(), elapsed: .zero))
            // The lines and the one the cursor waits on.
            #expect(lines.count + 1 <= max(rows, 3), "\(rows) rows: \(lines.count) lines")
        }
    }

    @Test func usesColourOnlyWhenAskedAndNeverUnderNoColor() {
        let plain = ProgressRenderer(width: 80).totalLine(self.total(), width: 80)
        #expect(!plain.contains("\u{1B}"))
        let colored = ProgressRenderer(width: 80, colors: true).totalLine(self.total(), width: 80)
        #expect(colored.hasPrefix("\u{1B}[1m"))
        #expect(!TerminalInfo.allowsColor(environment: ["NO_COLOR": "1"]))
        #expect(TerminalInfo.allowsColor(environment: ["TERM": "xterm-256color"]))
        #expect(!TerminalInfo.allowsColor(environment: ["TERM": "dumb"]))
    }

    @Test func redrawsInPlaceAndPrintsFinishedFilesAboveTheBlock() {
        var display = LiveDisplay(renderer: ProgressRenderer(width: 80), started: .now)
        let url = URL(string: "http://h/a.bin")!
        let now = ContinuousClock.now
        _ = display.output(for: .transfer(.init(id: "a", url: url, kind: .started(offset: 0))), at: now)
        let first = display.output(for: .progressed(self.total(done: 0)), at: now)
        #expect(first.hasPrefix("\r"))
        #expect(first.split(separator: "\n").count == 2, "one transfer line and the total line")
        let finished = display.output(
            for: .transfer(
                .init(
                    id: "a",
                    url: url,
                    kind: .finished(
                        .completed(CompletedFile(path: URL(filePath: "/d/a.bin"), byteCount: 5, sha256: nil))
                    )
                )
            ),
            at: now + .milliseconds(10)
        )
        #expect(finished.hasPrefix(String(repeating: "\u{1B}[1A\u{1B}[2K", count: 2) + "\r"), "the old block is erased")
        #expect(finished.contains("completed /d/a.bin (5 B)\n"))
        let end = display.output(for: .finished(BatchReport(batchID: BatchID(1), items: [])), at: now + .seconds(1))
        #expect(end == String(repeating: "\u{1B}[1A\u{1B}[2K", count: 1) + "\r", "the block is gone before the summary")
    }
}
