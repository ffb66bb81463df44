import Foundation
import Haul

/// Prints a batch's events the way the mode and the terminal ask: a live display on a terminal, plain lines in
/// pipes and logs, NDJSON with `--json`, failures only with `--quiet`.
enum EventPrinter {
    /// The events ``print(_:mode:)`` shows something for, so that a batch's stream carries only those: the live
    /// display on a terminal draws each file's progress; plain lines in a pipe or a log need no file's progress (on
    /// 2,000 small files, those events were half of what the stream carried).
    static func selection(for mode: EventRenderer.Mode) -> BatchEvent.Selection {
        if case .plain = mode, TerminalInfo.width() != nil { return .all }
        return mode.selection
    }

    /// Prints the events until the batch ends.
    /// - Returns: the bytes of completed files that earlier runs had left on disk (``ResumedBytes``), as far as the
    ///   mode's events tell (not at all with `--quiet`, whose summary has no totals).
    @discardableResult
    static func print(_ events: AsyncStream<BatchEvent>, mode: EventRenderer.Mode) async -> Int64 {
        var resumed = ResumedBytes()
        if case .plain = mode, let width = TerminalInfo.width() {
            let colors = TerminalInfo.allowsColor(environment: ProcessInfo.processInfo.environment)
            var display = LiveDisplay(renderer: ProgressRenderer(width: width, colors: colors), started: .now)
            for await event in events {
                resumed.note(event)
                let text = display.output(for: event, at: .now)
                if !text.isEmpty { FileHandle.standardOutput.write(Data(text.utf8)) }
            }
            return resumed.total
        }
        var renderer = EventRenderer(mode: mode)
        for await event in events {
            resumed.note(event)
            for line in renderer.lines(for: event, at: .now) { Get.printOutput(line) }
        }
        return resumed.total
    }
}

/// The bytes of the completed files that were on disk before this run started them: partial files an earlier run
/// left, continued with a `Range` request. The summary's speed counts only what this run moved (a resumed 1 GiB file
/// of which 400 MiB were there already is 624 MiB transferred, as curl and wget count it), and says how much of the
/// total was resumed. A transfer counts with the offset of its first start in this run: later starts (after a retry
/// or a pause) continue bytes this run fetched, and a restart from zero means none of the earlier bytes were kept.
struct ResumedBytes {
    private var offsets: [TransferID: Int64] = [:]
    /// What completed transfers had on disk when this run first started them.
    private(set) var total: Int64 = 0

    mutating func note(_ event: BatchEvent) {
        guard case .transfer(let transfer) = event else { return }
        switch transfer.kind {
        case .started(let offset):
            if self.offsets[transfer.id] == nil { self.offsets[transfer.id] = offset }
        case .restarted:
            self.offsets[transfer.id] = 0
        case .finished(let result):
            let offset = self.offsets.removeValue(forKey: transfer.id) ?? 0
            if case .completed = result { self.total += offset }
        case .queued, .progressed, .paused, .resumed, .retrying:
            break
        }
    }
}
