import Foundation

/// Control: pause, resume, cancel and the limits, for one transfer, a batch or all of them.
extension TransferManager.Core {
    mutating func pause(_ id: TransferID, aftermath: inout TransferManager.Aftermath) {
        guard self.transfers[id] != nil else { return }
        let action = self.transfers[id]!.machine.pause()
        self.apply(action, to: id, result: nil, at: self.now, aftermath: &aftermath)
    }

    mutating func resume(_ id: TransferID, aftermath: inout TransferManager.Aftermath) {
        guard self.transfers[id] != nil, !self.isShutDown else { return }
        let action = self.transfers[id]!.machine.resume()
        self.apply(action, to: id, result: nil, at: self.now, aftermath: &aftermath)
    }

    /// Sets, changes or removes one transfer's bandwidth limit; a running attempt feels it at its next chunk.
    mutating func setBandwidthLimit(_ bytesPerSecond: Int64?, of id: TransferID) {
        guard let record = self.transfers[id] else { return }
        self.transfers[id]!.request.bandwidthLimit = bytesPerSecond
        record.bandwidth?.setLimit(bytesPerSecond)
    }

    mutating func setPriority(_ priority: Int, of id: TransferID) {
        guard self.transfers[id] != nil else { return }
        self.transfers[id]!.request.priority = priority
        self.scheduler.setPriority(priority, of: id)
    }

    mutating func cancel(_ id: TransferID, aftermath: inout TransferManager.Aftermath) {
        guard self.transfers[id] != nil else { return }
        let action = self.transfers[id]!.machine.cancel()
        self.apply(action, to: id, result: .cancelled, at: self.now, aftermath: &aftermath)
    }

    /// Cancels a batch: its transfers stop, except those another unfinished batch also waits for, which leave
    /// this batch as cancelled and go on for the other.
    mutating func cancel(batch batchID: BatchID, aftermath: inout TransferManager.Aftermath) {
        guard let batch = self.batches[batchID], !batch.isFinished else { return }
        for id in batch.pending.keys {
            if let record = self.transfers[id], record.batches.count > 1, record.batches.contains(batchID) {
                self.transfers[id]!.batches.removeAll { $0 == batchID }
                self.settle(id, in: batchID, result: .cancelled, at: self.now, aftermath: &aftermath)
            } else {
                self.cancel(id, aftermath: &aftermath)
            }
        }
    }

    /// Stops everything for good: the manager's scope is ending. With a store, transfers are stopped and keep
    /// their partial files (a later manager resumes them); without one, they are cancelled.
    mutating func shutDown(aftermath: inout TransferManager.Aftermath) {
        guard !self.isShutDown else { return }
        self.isShutDown = true
        defer { self.endWaitIfTransfersEnded(aftermath: &aftermath) }
        if self.recordsToStore {
            self.stopAll(aftermath: &aftermath)
        } else {
            for id in Array(self.transfers.keys) { self.cancel(id, aftermath: &aftermath) }
        }
    }

    /// Stops every transfer, keeping partial files and the store's record of them, and ends every batch with
    /// what was unfinished reported as cancelled. A running transfer is left to end with its own result, which
    /// its batches wait for (its task stops at once; paused, it is cancelled in them): one whose body arrived as
    /// the stop came, or that was publishing its file, completes, and was reported cancelled while its file
    /// appeared, completed in the store (33 of 2,172 "cancelled" files when a list of tiny files was interrupted).
    mutating func stopAll(aftermath: inout TransferManager.Aftermath) {
        for id in Array(self.transfers.keys) { self.pause(id, aftermath: &aftermath) }
        for batchID in Array(self.batches.keys) {
            guard let pending = self.batches[batchID]?.pending, self.batches[batchID]?.isFinished == false else {
                continue
            }
            for id in pending.keys where !self.isRunning(id) {
                self.settle(id, in: batchID, result: .cancelled, at: self.now, aftermath: &aftermath)
            }
            self.batches[batchID]!.isSealed = true
            self.batches[batchID]!.isStopped = true
            self.finishIfDone(batchID, aftermath: &aftermath)
        }
    }

    /// Whether a transfer's attempt is under way (stopping included).
    func isRunning(_ id: TransferID) -> Bool {
        if case .running = self.transfers[id]?.machine.state { true } else { false }
    }

    mutating func apply(
        _ action: Download.StateMachine.Action,
        to id: TransferID,
        result: TransferResult?,
        at now: ContinuousClock.Instant,
        aftermath: inout TransferManager.Aftermath
    ) {
        switch action {
        case .none:
            break
        case .dequeueAndReportPaused:
            self.scheduler.removeWaiting(id)
            self.emit(id, .paused)
        case .enqueueAndReportResumed:
            self.emit(id, .resumed)
            self.start(
                self.scheduler.enqueue(
                    id,
                    host: self.transfers[id]!.host,
                    priority: self.transfers[id]!.request.priority
                ),
                aftermath: &aftermath
            )
        case .stopAttempt:
            if let signal = self.transfers[id]!.stopSignal { aftermath.stopSignals.append(signal) }
        case .reportPaused:
            self.emit(id, .paused)
            // A running transfer ``stopAll(aftermath:)`` left to end ended stopped: its stopped batches take it
            // as the others, cancelled.
            if let batchIDs = self.transfers[id]?.batches {
                for batchID in batchIDs
                where self.batches[batchID]?.isStopped == true && self.batches[batchID]?.pending[id] != nil {
                    self.settle(id, in: batchID, result: .cancelled, at: now, aftermath: &aftermath)
                    self.finishIfDone(batchID, aftermath: &aftermath)
                }
            }
        case .enqueue:
            self.start(
                self.scheduler.enqueue(
                    id,
                    host: self.transfers[id]!.host,
                    priority: self.transfers[id]!.request.priority
                ),
                aftermath: &aftermath
            )
        case .scheduleRetry:
            preconditionFailure("A retry is scheduled only when an attempt ends")
        case .stopRetryWaitAndReportPaused:
            if let signal = self.transfers[id]!.stopSignal { aftermath.stopSignals.append(signal) }
            self.emit(id, .paused)
        case .stopRetryWaitAndFinish(let outcome):
            if let signal = self.transfers[id]!.stopSignal { aftermath.stopSignals.append(signal) }
            self.apply(
                .finish(outcome, removePartialFile: true, dequeue: false),
                to: id,
                result: result,
                at: now,
                aftermath: &aftermath
            )
        case .finish(let outcome, let removePartialFile, let dequeue):
            if dequeue { self.scheduler.removeWaiting(id) }
            if removePartialFile, let partPath = self.withTransfer(id, { $0.partPath }) ?? nil {
                aftermath.removedFiles.append(partPath)
            }
            let finalResult: TransferResult = outcome == .cancelled ? .cancelled : (result ?? .cancelled)
            self.finish(id, result: finalResult, at: now, aftermath: &aftermath)
        }
    }
}
